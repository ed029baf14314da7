package ranking

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// When Redis has to reload a script, the calls of a pipeline can apply
// out of order; it must not matter, so every ID stays in one chunk.
func TestGroupByIDKeepsEachIDInOneChunkInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	items := make([]Item, 5000)
	for i := range items {
		items[i] = Item{ID: fmt.Sprintf("id-%d", rng.IntN(700)), Version: int64(i)}
	}
	chunks := groupByID(items, 256)
	seen := make([]bool, len(items))
	chunkOf := map[string]int{}
	for c, idx := range chunks {
		if len(idx) == 0 {
			t.Fatalf("chunk %d is empty", c)
		}
		for j, i := range idx {
			if seen[i] {
				t.Fatalf("item %d sent twice", i)
			}
			seen[i] = true
			id := items[i].ID
			if prev, ok := chunkOf[id]; ok && prev != c {
				t.Fatalf("%s is split across chunks %d and %d", id, prev, c)
			}
			chunkOf[id] = c
			if j > 0 && idx[j-1] >= i {
				t.Fatalf("chunk %d is out of order", c)
			}
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("item %d never sent", i)
		}
	}
	// A chunk holds at most 256 IDs (and all their items).
	ids := make([]map[string]bool, len(chunks))
	for id, c := range chunkOf {
		if ids[c] == nil {
			ids[c] = map[string]bool{}
		}
		ids[c][id] = true
	}
	for c, set := range ids {
		if len(set) > 256 {
			t.Fatalf("chunk %d holds %d ids", c, len(set))
		}
	}
}
