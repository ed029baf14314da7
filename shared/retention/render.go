package retention

import (
	"fmt"
	"strings"
	"time"
)

// Markdown renders the families as the README's Retention table: family,
// store (the DynamoDB table, or Redis), key pattern, lifetime and what
// removes it, one row each, in the order of Families.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| Family | Store | Key | Lifetime | Removed by |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, f := range Families() {
		store := f.Table
		if f.Store == Redis {
			store = "Redis"
		}
		removed := f.RemovedBy
		if removed == "" {
			removed = "—"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", f.Name, store, f.keyCell(), f.LifetimeText(), removed)
	}
	return b.String()
}

// keyCell is the family's key patterns as Markdown code, with its
// condition.
func (f Family) keyCell() string {
	code := func(s string) string { return "`" + strings.ReplaceAll(s, "|", `\|`) + "`" }
	cell := code(f.Key)
	if f.Sort != "" {
		cell += " · " + code(f.Sort)
	}
	if w := f.Where; w != nil {
		if w.Value == "" {
			cell += fmt.Sprintf(" (no `%s`)", w.Attr)
		} else {
			cell += fmt.Sprintf(" (`%s` %s)", w.Attr, w.Value)
		}
	}
	return cell
}

// LifetimeText says how long the family's items live, in words.
func (f Family) LifetimeText() string {
	s := f.Lifetime
	if f.TTL > 0 {
		s = "expires " + Duration(f.TTL) + " from " + f.From
	}
	if !f.Bounded {
		s = "**unbounded**: " + s
	}
	return s
}

// Duration says d in the largest whole unit: days, hours, minutes or
// seconds.
func Duration(d time.Duration) string {
	unit := func(n int64, name string) string {
		if n == 1 {
			return "1 " + name
		}
		return fmt.Sprintf("%d %ss", n, name)
	}
	switch {
	case d%(24*time.Hour) == 0:
		return unit(int64(d/(24*time.Hour)), "day")
	case d%time.Hour == 0:
		return unit(int64(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return unit(int64(d/time.Minute), "minute")
	}
	return unit(int64(d/time.Second), "second")
}
