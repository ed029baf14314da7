// Command bench measures Rally's hot paths beside their physical floors on
// real redis-server and DynamoDB Local, and writes BENCHMARKS.md (`make
// bench`). Each figure is a value, the floor measured in the same run and
// their ratio, so the report reads the same on any machine.
//
//	go run ./infra/bench [-out BENCHMARKS.md] [-only name,...] [-cpuprofile file]
//
// RALLY_BENCH_SCALE=1 measures boards of 10M members instead of 1M.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

// A bench measures one section of the report.
type bench struct {
	name string
	run  func(ctx context.Context, env *Env) (Section, error)
}

// benches are the report's sections, in order.
var benches = []bench{
	{"roundtrips", benchRoundTrips},
	{"latency", benchLatency},
	{"capacity", benchCapacity},
	{"worst", benchWorst},
	{"erasure", benchErasure},
	{"cost", benchCost},
	{"throughput", benchThroughput},
	{"ranking", benchRanking},
	{"visible", benchVisible},
	{"coalescing", benchCoalescing},
	{"coldstart", benchColdstart},
	{"size", benchSize},
	{"ageing", benchAgeing},
}

func main() {
	if err := benchMain(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func benchMain() error {
	out := flag.String("out", "BENCHMARKS.md", "the report to write (- prints it)")
	only := flag.String("only", "", "comma-separated benches to run (default all): "+names())
	profile := flag.String("cpuprofile", "", "write a CPU profile of this process (the stacks' gateway, handlers and pollers) to this file")
	flag.Parse()
	if *profile != "" {
		stop, err := startProfile(*profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return run(ctx, *out, *only)
}

// startProfile profiles this process's CPU into path until the returned
// function is called.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func names() string {
	var n []string
	for _, b := range benches {
		n = append(n, b.name)
	}
	return strings.Join(n, ",")
}

func run(ctx context.Context, out, only string) error {
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	start := time.Now()
	env, err := StartEnv(ctx)
	if err != nil {
		return err
	}
	defer env.Close()
	var sections []Section
	for _, b := range benches {
		if len(want) > 0 && !want[b.name] {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s\n", b.name)
		t := time.Now()
		s, err := b.run(ctx, env)
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		fmt.Fprintf(os.Stderr, "bench: %s done in %s\n", b.name, time.Since(t).Round(time.Second))
		sections = append(sections, s)
	}
	h := Header{Date: start, Machine: machine(), GoVersion: runtime.Version(), Command: "make bench", Took: time.Since(start)}
	if only == "cost" {
		h.Command = "make cost"
	}
	if out == "-" {
		return Write(os.Stdout, h, sections)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := Write(f, h, sections); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// machine describes this machine: CPU model, cores and memory.
func machine() string {
	model := "unknown CPU"
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(raw), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%s, %d cores%s, %s/%s", model, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH)
}
