package games

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
)

// API serves the game metadata route.
type API struct {
	Store Store
	Clock clock.Clock
}

type (
	putGameRequest struct {
		Title        *string `json:"title"`
		ThumbnailURL *string `json:"thumbnail_url"`
	}
	putGameBody struct {
		GameID       string    `json:"game_id"`
		Title        string    `json:"title"`
		ThumbnailURL *string   `json:"thumbnail_url"`
		UpdatedAt    time.Time `json:"updated_at"`
	}
)

// PutGame serves PUT /v1/games/{game_id} (service callers).
func (a *API) PutGame(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Service(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	id := r.Path("game_id")
	api.CheckID(&f, "game_id", id)
	var in putGameRequest
	if err := r.Decode(&in); err != nil {
		return api.Response{}, err
	}
	switch {
	case in.Title == nil:
		f.Add("title", "is required")
	case strings.TrimSpace(*in.Title) == "" || utf8.RuneCountInString(*in.Title) > 200:
		f.Add("title", "must be 1-200 characters")
	}
	thumb := ""
	if in.ThumbnailURL != nil {
		thumb = *in.ThumbnailURL
		api.CheckURL(&f, "thumbnail_url", thumb)
	}
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	g := Game{ID: id, Title: *in.Title, ThumbnailURL: thumb, UpdatedAt: a.Clock.Now()}
	if err := a.Store.Put(ctx, g); err != nil {
		return api.Response{}, err
	}
	body := putGameBody{GameID: g.ID, Title: g.Title, UpdatedAt: g.UpdatedAt}
	if g.ThumbnailURL != "" {
		body.ThumbnailURL = &g.ThumbnailURL
	}
	return api.OK(body), nil
}
