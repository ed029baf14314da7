package ranking

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/rallyhq/rally/shared/ranking/internal/redistest"
)

// What a caller reads beside a board (how fresh it is) comes in the same
// round trip as the board, from any hash slot, and changes nothing of the
// board's answer.
func TestAlsoReadsBesideABoardInTheSameRoundTrip(t *testing.T) {
	rdb := redistest.Server(t)
	hook := &roundTrips{}
	rdb.AddHook(hook)
	ctx := context.Background()
	e := New(rdb)
	b := Board{Tag: "lb:also", Name: "all"}
	fillBoard(t, e, b, 300)
	if err := rdb.Set(ctx, "beside", "42", 0).Err(); err != nil {
		t.Fatal(err)
	}
	friends := []string{"p0007", "p0014", "p0021", "nobody"}
	for _, key := range []string{"beside", "missing"} {
		want := map[string]string{"beside": "42", "missing": ""}[key]
		reads := []struct {
			name string
			read func(opts ...ReadOption) (any, error)
		}{
			{"Top", func(opts ...ReadOption) (any, error) {
				es, total, err := e.Top(ctx, b, 10, opts...)
				return fmt.Sprint(es, total), err
			}},
			{"Around", func(opts ...ReadOption) (any, error) {
				self, w, total, err := e.Around(ctx, b, "p0100", 3, opts...)
				return fmt.Sprint(self, w, total), err
			}},
			{"Among", func(opts ...ReadOption) (any, error) { return e.Among(ctx, b, friends, opts...) }},
			{"Among none", func(opts ...ReadOption) (any, error) { return e.Among(ctx, b, nil, opts...) }},
		}
		for _, r := range reads {
			plain, err := r.read()
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			got := "unset"
			hook.n = 0
			with, err := r.read(Also(key, &got))
			if err != nil {
				t.Fatalf("%s with %s: %v", r.name, key, err)
			}
			if hook.n != 1 || got != want || !reflect.DeepEqual(plain, with) {
				t.Fatalf("%s with %s: %d round trips, read %q (want %q), answer %v (want %v)", r.name, key, hook.n, got, want, with, plain)
			}
		}
	}
	// A Redis that lost its script cache answers both, one round trip more.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got := ""
	hook.n = 0
	if _, _, _, err := e.Around(ctx, b, "p0100", 3, Also("beside", &got)); err != nil || got != "42" || hook.n != 2 {
		t.Fatalf("Around after SCRIPT FLUSH: %v, read %q, %d round trips", err, got, hook.n)
	}
}
