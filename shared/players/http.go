package players

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/errs"
)

// API serves the player routes (service callers: game servers sync who a
// player is and who their friends are).
type API struct {
	Store Store
	Clock clock.Clock
}

type (
	friendsRequest struct {
		FriendIDs *[]string `json:"friend_ids"`
	}
	friendsReply struct {
		PlayerID  string   `json:"player_id"`
		FriendIDs []string `json:"friend_ids"`
	}
	profileRequest struct {
		DisplayName *string `json:"display_name"`
		AvatarURL   *string `json:"avatar_url"`
		Region      *string `json:"region"`
	}
	profileBody struct {
		PlayerID    string    `json:"player_id"`
		DisplayName string    `json:"display_name"`
		AvatarURL   *string   `json:"avatar_url"`
		Region      *string   `json:"region"`
		UpdatedAt   time.Time `json:"updated_at"`
	}
)

func playerArg(r *api.Request, f *errs.Fields) string {
	p := r.Path("player_id")
	api.CheckID(f, "player_id", p)
	return p
}

// PutFriends serves PUT /v1/players/{player_id}/friends.
func (a *API) PutFriends(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Service(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	player := playerArg(r, &f)
	var in friendsRequest
	if err := r.Decode(&in); err != nil {
		return api.Response{}, err
	}
	var friends []string
	switch {
	case in.FriendIDs == nil:
		f.Add("friend_ids", "is required (an empty list clears the friends)")
	case len(*in.FriendIDs) > MaxFriends:
		f.Add("friend_ids", "at most 1000 friends")
	default:
		seen := map[string]bool{player: true}
		for _, id := range *in.FriendIDs {
			if !api.ValidID(id) {
				f.Add("friend_ids", "each id must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'")
				break
			}
			if !seen[id] {
				seen[id] = true
				friends = append(friends, id)
			}
		}
	}
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	if err := a.Store.PutFriends(ctx, player, friends); err != nil {
		return api.Response{}, err
	}
	if friends == nil {
		friends = []string{}
	}
	return api.OK(friendsReply{PlayerID: player, FriendIDs: friends}), nil
}

// PutProfile serves PUT /v1/players/{player_id}/profile.
func (a *API) PutProfile(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Service(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	p := Profile{PlayerID: playerArg(r, &f)}
	var in profileRequest
	if err := r.Decode(&in); err != nil {
		return api.Response{}, err
	}
	switch {
	case in.DisplayName == nil:
		f.Add("display_name", "is required")
	case strings.TrimSpace(*in.DisplayName) == "" || utf8.RuneCountInString(*in.DisplayName) > 64:
		f.Add("display_name", "must be 1-64 characters")
	default:
		p.DisplayName = *in.DisplayName
	}
	if in.AvatarURL != nil {
		api.CheckURL(&f, "avatar_url", *in.AvatarURL)
		p.AvatarURL = *in.AvatarURL
	}
	if in.Region != nil {
		api.CheckID(&f, "region", *in.Region)
		p.Region = *in.Region
	}
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	p.UpdatedAt = a.Clock.Now()
	if err := a.Store.PutProfile(ctx, p); err != nil {
		return api.Response{}, err
	}
	body := profileBody{PlayerID: p.PlayerID, DisplayName: p.DisplayName, UpdatedAt: p.UpdatedAt}
	if p.AvatarURL != "" {
		body.AvatarURL = &p.AvatarURL
	}
	if p.Region != "" {
		body.Region = &p.Region
	}
	return api.OK(body), nil
}
