package ranking

import (
	"hash/fnv"
	"strconv"
)

// Key layout. Every key of a board starts with
//
//	rank:{<tag>}:<name>|
//
// (names cannot contain '|', so the prefix names one board) followed by
//
//	z              the live sorted set, always under this name, so Top
//	               reads it without a script
//	n              the next sorted set, built by a load; it replaces z in
//	               one step when the load commits
//	m              meta hash: which lookup slot is live, each slot's level
//	               and insert count, load state, expiry deadline
//	a<l>:<i>       lookup bucket i (hex) of level l in slot a (b likewise);
//	               one slot goes with z, the other with n
//
// Lookup buckets are hashes ID -> value that must stay small enough for the
// listpack encoding (128 entries by default, and ElastiCache Serverless
// does not let us raise it). A slot starts at level 0 (one bucket); level l
// has 8^l buckets and takes new IDs until it has received levelCap(l) of
// them (64 per bucket on average, at most about 100 in the fullest), then
// new IDs go to the next level. An ID stays in the level it was first
// written to, so a lookup probes the levels from the current one down.
// Because scripts may only touch declared keys, callers pass the ID's
// bucket in every level of both slots.
const (
	keyPrefix = "rank:{"
	levels    = 8 // level 7 has 2^21 buckets: ~134M IDs before buckets outgrow listpacks
	levelBits = 3
	slotA     = "a"
	slotB     = "b"
)

// levelCap is how many new IDs level l takes before the next level opens.
func levelCap(l int) int64 { return 64 << (levelBits * l) }

// levelFor is the smallest level that can take n IDs on its own.
func levelFor(n int64) int {
	for l := 0; l < levels-1; l++ {
		if n <= levelCap(l) {
			return l
		}
	}
	return levels - 1
}

type boardKeys struct{ base string }

func (b Board) keys() boardKeys {
	return boardKeys{base: keyPrefix + b.Tag + "}:" + b.Name + "|"}
}

func (k boardKeys) meta() string { return k.base + "m" }
func (k boardKeys) live() string { return k.base + "z" }
func (k boardKeys) next() string { return k.base + "n" }

// heads are the keys every board script starts with.
func (k boardKeys) heads() []string { return []string{k.meta(), k.live(), k.next()} }
func (k boardKeys) bucket(slot string, level int, idx uint64) string {
	return k.base + slot + strconv.Itoa(level) + ":" + strconv.FormatUint(idx, 16)
}

func idHash(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

func bucketIndex(h uint64, level int) uint64 { return h & (1<<(levelBits*level) - 1) }

// appendIDKeys appends id's bucket in every level of slot a, then of slot b
// (2*levels keys), the layout the scripts' bucket() expects.
func (k boardKeys) appendIDKeys(dst []string, id string) []string {
	h := idHash(id)
	for _, slot := range [2]string{slotA, slotB} {
		for l := 0; l < levels; l++ {
			dst = append(dst, k.bucket(slot, l, bucketIndex(h, l)))
		}
	}
	return dst
}

// eachBucket calls fn with every bucket key a slot at level top may have.
func (k boardKeys) eachBucket(slot string, top int, fn func(key string)) {
	for l := 0; l <= top && l < levels; l++ {
		for i := uint64(0); i < 1<<(levelBits*l); i++ {
			fn(k.bucket(slot, l, i))
		}
	}
}
