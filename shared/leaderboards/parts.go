package leaderboards

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
)

// archiveLine is one line of an archive's JSON Lines.
type archiveLine struct {
	Rank      int    `json:"rank"`
	PlayerID  string `json:"player_id"`
	Score     int64  `json:"score"`
	ReachedAt string `json:"reached_at"`
}

// PartKey is where part n of a board period's JSON Lines lives.
func PartKey(board, period string, n int) string {
	return fmt.Sprintf("%spart-%06d.jsonl.gz", ArchivePrefix(board, period), n)
}

// ArchiveDocuments reads and writes the archive's JSON Lines parts: an
// erasure after a close rewrites the part that names the player.
type ArchiveDocuments interface {
	Documents
	Get(ctx context.Context, key string) ([]byte, error)
}

// encodePart gzips lines as JSON Lines.
func encodePart(lines []archiveLine) ([]byte, error) {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	enc := json.NewEncoder(zw)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodePart reads a part's lines back.
func decodePart(data []byte) ([]archiveLine, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	var lines []archiveLine
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l archiveLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, sc.Err()
}

// strikePart rewrites the part at key without player's line, the others
// keeping their ranks; a part that no longer names them is left as it is.
func strikePart(ctx context.Context, docs ArchiveDocuments, key, player string) error {
	data, err := docs.Get(ctx, key)
	if err != nil {
		return err
	}
	lines, err := decodePart(data)
	if err != nil {
		return fmt.Errorf("read archive part %s: %w", key, err)
	}
	kept := lines[:0]
	for _, l := range lines {
		if l.PlayerID != player {
			kept = append(kept, l)
		}
	}
	if len(kept) == len(lines) {
		return nil
	}
	out, err := encodePart(kept)
	if err != nil {
		return err
	}
	return docs.Put(ctx, key, out)
}
