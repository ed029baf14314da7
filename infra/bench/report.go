package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// Row is one figure of the report: what was measured, its value, the floor
// it is compared with (measured in the same run) and the goal, if any.
type Row struct {
	// Name says what was measured ("GET /v1/games/{game_id}/favorites/count, p50, c=1").
	Name string
	// Value and Floor are in Unit; Floor is the physical floor the value
	// is compared with (a raw Redis command, a bare DynamoDB Local call, a
	// bare aws-lambda-go binary), FloorName says which.
	Value, Floor float64
	Unit         string
	FloorName    string
	// Goal states the target as text ("≤ 1.3×"); Met reports whether the
	// figure meets it. A row without a goal leaves both empty.
	Goal string
	Met  *bool
	// Note explains a figure (or why a goal is not met).
	Note string
}

// Ratio is Value / Floor (NaN without a floor).
func (r Row) Ratio() float64 {
	if r.Floor == 0 {
		return math.NaN()
	}
	return r.Value / r.Floor
}

// Section is one part of the report.
type Section struct {
	Title string
	// Intro says how the figures were made (the workload, the floor).
	Intro string
	Rows  []Row
	// Body is Markdown of the section's own (tables of another shape),
	// written after the intro and before the rows, if any.
	Body string
}

// Within reports whether got meets a goal of at most limit.
func Within(got, limit float64) *bool { ok := got <= limit; return &ok }

// Millis is d in milliseconds.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Percentile is the p-th percentile (0 < p ≤ 100) of samples (nearest rank).
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}

// Header is what the report says about the run.
type Header struct {
	Date      time.Time
	Machine   string
	GoVersion string
	Command   string
	Took      time.Duration
}

// Write renders the report as Markdown.
func Write(w io.Writer, h Header, sections []Section) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Rally benchmarks\n\n")
	fmt.Fprintf(&b, "Written by `%s` on %s in %s. Machine: %s. %s.\n\n", h.Command, h.Date.UTC().Format("2006-01-02 15:04 MST"), h.Took.Round(time.Second), h.Machine, h.GoVersion)
	b.WriteString("Every figure is given beside its floor, measured in the same run on the same machine, and as a ratio to it: a regression shows as a ratio that grows, whatever the machine. Real redis-server and DynamoDB Local throughout.\n\n")
	for _, s := range sections {
		fmt.Fprintf(&b, "## %s\n\n", s.Title)
		if s.Intro != "" {
			fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(s.Intro))
		}
		if s.Body != "" {
			fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(s.Body))
		}
		if len(s.Rows) == 0 {
			continue
		}
		b.WriteString("| measured | value | floor | ratio | goal | note |\n|---|---:|---|---:|---|---|\n")
		for _, r := range s.Rows {
			floor := "—"
			if r.FloorName != "" {
				floor = fmt.Sprintf("%s %s (%s)", number(r.Floor), r.Unit, r.FloorName)
			}
			ratio := "—"
			if !math.IsNaN(r.Ratio()) {
				ratio = fmt.Sprintf("%.2f×", r.Ratio())
			}
			goal := r.Goal
			if r.Met != nil {
				if *r.Met {
					goal += " ✔ met"
				} else {
					goal += " ✘ not met"
				}
			}
			fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %s | %s |\n", r.Name, number(r.Value), r.Unit, floor, ratio, goal, r.Note)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// number prints a figure with the precision it deserves.
func number(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
