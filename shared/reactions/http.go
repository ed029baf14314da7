package reactions

import (
	"context"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/games"
	"github.com/rallyhq/rally/shared/idempotency"
	"github.com/rallyhq/rally/shared/routes"
)

// API serves the favorites and likes routes.
type API struct {
	Service     *Service
	Idempotency *idempotency.Store
	Cursors     api.Cursors
}

// MaxStatusIDs is the most targets one status check may ask about.
const MaxStatusIDs = 100

// Response bodies.
type (
	favoriteBody struct {
		GameID    string     `json:"game_id"`
		Favorited bool       `json:"favorited"`
		Changed   bool       `json:"changed"`
		CreatedAt *time.Time `json:"created_at,omitempty"`
	}
	likeBody struct {
		PostID  string `json:"post_id"`
		Liked   bool   `json:"liked"`
		Changed bool   `json:"changed"`
	}
	gameBody struct {
		Title        string  `json:"title"`
		ThumbnailURL *string `json:"thumbnail_url"`
	}
	favoriteItem struct {
		GameID    string    `json:"game_id"`
		CreatedAt time.Time `json:"created_at"`
		Game      *gameBody `json:"game"`
	}
	favoritesPage struct {
		Items      []favoriteItem `json:"items"`
		NextCursor *string        `json:"next_cursor"`
	}
	statusBody struct {
		UserID   string          `json:"user_id"`
		Statuses map[string]bool `json:"statuses"`
		Degraded bool            `json:"degraded,omitempty"`
	}
	gameCountBody struct {
		GameID   string    `json:"game_id"`
		Count    int64     `json:"count"`
		AsOf     time.Time `json:"as_of"`
		Degraded bool      `json:"degraded,omitempty"`
	}
	postCountBody struct {
		PostID   string    `json:"post_id"`
		Count    int64     `json:"count"`
		AsOf     time.Time `json:"as_of"`
		Degraded bool      `json:"degraded,omitempty"`
	}
	topItem struct {
		Rank   int       `json:"rank"`
		GameID string    `json:"game_id"`
		Score  int64     `json:"score"`
		Game   *gameBody `json:"game"`
	}
	topBody struct {
		Window   Window    `json:"window"`
		Items    []topItem `json:"items"`
		AsOf     time.Time `json:"as_of"`
		Degraded bool      `json:"degraded,omitempty"`
	}
)

// target validates the caller and the target id path parameter of a write.
func writeTarget(r *api.Request, kind Kind, param string) (Caller, Target, error) {
	player, err := r.Player()
	if err != nil {
		return Caller{}, Target{}, err
	}
	var f errs.Fields
	id := r.Path(param)
	api.CheckID(&f, param, id)
	if err := f.Err(); err != nil {
		return Caller{}, Target{}, err
	}
	if err := r.NoBody(); err != nil {
		return Caller{}, Target{}, err
	}
	return Caller{Player: player}, Target{Kind: kind, ID: id}, nil
}

func favoriteResponse(e Edge, changed bool) api.Response {
	b := favoriteBody{GameID: e.TargetID, Favorited: e.Active(), Changed: changed}
	if e.Active() {
		at := e.CreatedAt
		b.CreatedAt = &at
	}
	return api.OK(b)
}

func likeResponse(e Edge, changed bool) api.Response {
	return api.OK(likeBody{PostID: e.TargetID, Liked: e.Active(), Changed: changed})
}

// FavoriteGame serves POST /v1/favorites/{game_id}.
func (a *API) FavoriteGame(ctx context.Context, r *api.Request) (api.Response, error) {
	c, t, err := writeTarget(r, Favorite, "game_id")
	if err != nil {
		return api.Response{}, err
	}
	return api.Idempotent(ctx, a.Idempotency, r, routes.FavoriteGame.Function, c.Player, false, func(ctx context.Context) (api.Response, error) {
		e, changed, err := a.Service.React(ctx, c, t)
		if err != nil {
			return api.Response{}, err
		}
		return favoriteResponse(e, changed), nil
	})
}

// UnfavoriteGame serves DELETE /v1/favorites/{game_id}.
func (a *API) UnfavoriteGame(ctx context.Context, r *api.Request) (api.Response, error) {
	c, t, err := writeTarget(r, Favorite, "game_id")
	if err != nil {
		return api.Response{}, err
	}
	e, changed, err := a.Service.Unreact(ctx, c, t)
	if err != nil {
		return api.Response{}, err
	}
	return favoriteResponse(e, changed), nil
}

// LikePost serves PUT /v1/posts/{post_id}/like.
func (a *API) LikePost(ctx context.Context, r *api.Request) (api.Response, error) {
	c, t, err := writeTarget(r, Like, "post_id")
	if err != nil {
		return api.Response{}, err
	}
	e, changed, err := a.Service.React(ctx, c, t)
	if err != nil {
		return api.Response{}, err
	}
	return likeResponse(e, changed), nil
}

// UnlikePost serves DELETE /v1/posts/{post_id}/like.
func (a *API) UnlikePost(ctx context.Context, r *api.Request) (api.Response, error) {
	c, t, err := writeTarget(r, Like, "post_id")
	if err != nil {
		return api.Response{}, err
	}
	e, changed, err := a.Service.Unreact(ctx, c, t)
	if err != nil {
		return api.Response{}, err
	}
	return likeResponse(e, changed), nil
}

// ToggleLike serves POST /v1/posts/{post_id}/like/toggle. With an
// Idempotency-Key, the flip records the key on the edge in the same
// write, so a retry is answered as the first was and never flips twice.
func (a *API) ToggleLike(ctx context.Context, r *api.Request) (api.Response, error) {
	c, t, err := writeTarget(r, Like, "post_id")
	if err != nil {
		return api.Response{}, err
	}
	key, err := r.IdempotencyKey(false)
	if err != nil {
		return api.Response{}, err
	}
	var commit *Commit
	if key != "" {
		commit = &Commit{Key: key, Hash: r.IdempotencyHash()}
	}
	e, err := a.Service.Toggle(ctx, c, t, commit)
	if err != nil {
		return api.Response{}, err
	}
	resp := likeResponse(e, true)
	if commit != nil && commit.Replayed {
		resp.Headers = map[string]string{api.ReplayedHeader: "true"}
	}
	return resp, nil
}

// ListFavorites serves GET /v1/users/{user_id}/favorites.
func (a *API) ListFavorites(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Player(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	user := r.Path("user_id")
	api.CheckID(&f, "user_id", user)
	limit := r.IntQuery(&f, "limit", 50, 1, 100)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	scope := routes.ListFavorites.Function + ":" + user
	var after Position
	if cur := r.Query("cursor"); cur != "" {
		if err := a.Cursors.Decode(ctx, scope, cur, &after); err != nil {
			return api.Response{}, err
		}
	}
	page, err := a.Service.List(ctx, user, Favorite, limit, after)
	if err != nil {
		return api.Response{}, err
	}
	ids := make([]string, len(page.Edges))
	for i, e := range page.Edges {
		ids[i] = e.TargetID
	}
	games := a.Service.GamesOf(ctx, ids)
	body := favoritesPage{Items: make([]favoriteItem, 0, len(page.Edges))}
	for _, e := range page.Edges {
		body.Items = append(body.Items, favoriteItem{GameID: e.TargetID, CreatedAt: e.CreatedAt, Game: gameOf(games, e.TargetID)})
	}
	if page.Next != nil {
		cur, err := a.Cursors.Encode(scope, page.Next)
		if err != nil {
			return api.Response{}, err
		}
		body.NextCursor = &cur
	}
	return api.OK(body), nil
}

func gameOf(known map[string]games.Game, id string) *gameBody {
	g, ok := known[id]
	if !ok {
		return nil
	}
	b := &gameBody{Title: g.Title}
	if g.ThumbnailURL != "" {
		u := g.ThumbnailURL
		b.ThumbnailURL = &u
	}
	return b
}

// FavoriteStatus serves GET /v1/favorites/status.
func (a *API) FavoriteStatus(ctx context.Context, r *api.Request) (api.Response, error) {
	player, err := r.Player()
	if err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	user := player
	if _, ok := r.Event.QueryStringParameters["user_id"]; ok {
		user = r.Query("user_id")
		api.CheckID(&f, "user_id", user)
	}
	raw := r.Query("game_ids")
	var ids []string
	if raw == "" {
		f.Add("game_ids", "give 1 to 100 comma-separated game ids")
	} else {
		ids = strings.Split(raw, ",")
		if len(ids) > MaxStatusIDs {
			f.Add("game_ids", "at most 100 game ids")
		} else {
			for _, id := range ids {
				if !api.ValidID(id) {
					f.Add("game_ids", "each id must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'")
					break
				}
			}
		}
	}
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	statuses, degraded, err := a.Service.Statuses(ctx, user, Favorite, ids)
	if err != nil {
		return api.Response{}, err
	}
	return api.OK(statusBody{UserID: user, Statuses: statuses, Degraded: degraded}), nil
}

func (a *API) count(ctx context.Context, r *api.Request, kind Kind, param string) (Count, string, error) {
	if _, err := r.Player(); err != nil {
		return Count{}, "", err
	}
	var f errs.Fields
	id := r.Path(param)
	api.CheckID(&f, param, id)
	if err := f.Err(); err != nil {
		return Count{}, "", err
	}
	c, err := a.Service.Count(ctx, Target{Kind: kind, ID: id})
	if err != nil {
		return Count{}, "", err
	}
	c.AsOf = asOf(c.AsOf, a.Service.Clock.Now())
	return c, id, nil
}

// CountFavorites serves GET /v1/games/{game_id}/favorites/count.
func (a *API) CountFavorites(ctx context.Context, r *api.Request) (api.Response, error) {
	c, id, err := a.count(ctx, r, Favorite, "game_id")
	if err != nil {
		return api.Response{}, err
	}
	return api.OK(gameCountBody{GameID: id, Count: c.N, AsOf: c.AsOf, Degraded: c.Degraded}), nil
}

// CountLikes serves GET /v1/posts/{post_id}/likes/count.
func (a *API) CountLikes(ctx context.Context, r *api.Request) (api.Response, error) {
	c, id, err := a.count(ctx, r, Like, "post_id")
	if err != nil {
		return api.Response{}, err
	}
	return api.OK(postCountBody{PostID: id, Count: c.N, AsOf: c.AsOf, Degraded: c.Degraded}), nil
}

// TopGames serves GET /v1/games/top.
func (a *API) TopGames(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Player(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	limit := r.IntQuery(&f, "limit", 100, 1, 100)
	w := Window(r.OneOf(&f, "window", string(Last24h), string(Last24h), string(Last7d), string(AllTime)))
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	top, err := a.Service.Top(ctx, Favorite, w, limit)
	if err != nil {
		return api.Response{}, err
	}
	ids := make([]string, len(top.Items))
	for i, it := range top.Items {
		ids[i] = it.ID
	}
	games := a.Service.GamesOf(ctx, ids)
	body := topBody{Window: w, Items: make([]topItem, 0, len(top.Items)), AsOf: top.AsOf, Degraded: top.Degraded}
	for _, it := range top.Items {
		body.Items = append(body.Items, topItem{Rank: it.Rank, GameID: it.ID, Score: it.Score, Game: gameOf(games, it.ID)})
	}
	return api.OK(body), nil
}
