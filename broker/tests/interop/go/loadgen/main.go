// Command gazette-loadgen drives small-record appends with Go Gazette's own
// client library (broker/client), as the Go side of bench/bench_go.py.
//
//	gazette-loadgen seq  --broker URL --journal J [--count 1000] [--size 1024] [--warmup 50]
//
// appends --count records of --size bytes one after another, each its own
// client.Append (the next starts when the previous is acknowledged);
//
//	gazette-loadgen rate --broker URL --journal J --rate BYTES_PER_S [--seconds 5] [--size 1024]
//
// hands records to a client.AppendService at a fixed rate (scheduled every
// millisecond; due records are written on time even when appends lag) and
// times each from its scheduled moment to the acknowledgement of the batch
// carrying it. The first --warmup-seconds are not measured.
//
// Both dial as Go applications do (mainboilerplate.ClientConfig) with a route
// cache, so appends go straight to the journal's primary. Both print one JSON
// line: {"count", "seconds", "latencies_us": [...]}.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	mbp "go.gazette.dev/core/mainboilerplate"
)

type result struct {
	Count       int     `json:"count"`
	Seconds     float64 `json:"seconds"`
	LatenciesUs []int64 `json:"latencies_us"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gazette-loadgen seq|rate [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	broker := fs.String("broker", "http://localhost:8080", "broker address")
	journal := fs.String("journal", "", "journal to append to")
	size := fs.Int("size", 1024, "bytes per record")
	count := fs.Int("count", 1000, "records (seq)")
	warmup := fs.Int("warmup", 50, "unmeasured appends first (seq)")
	rate := fs.Float64("rate", 1e6, "bytes per second (rate)")
	seconds := fs.Float64("seconds", 5, "measured seconds (rate)")
	warmupSeconds := fs.Float64("warmup-seconds", 1, "unmeasured seconds first (rate)")
	_ = fs.Parse(os.Args[2:])

	pb.RegisterGRPCDispatcher("local") // The balancer MustDial names.
	var cfg mbp.ClientConfig
	cfg.Address = pb.Endpoint(*broker)
	cfg.Cache.Size = 64
	cfg.Cache.TTL = time.Minute
	ctx := context.Background()
	rjc := cfg.MustRoutedJournalClient(ctx)

	record := make([]byte, *size)
	for i := range record {
		record[i] = 'a' + byte(i%26)
	}
	record[len(record)-1] = '\n'
	req := pb.AppendRequest{Journal: pb.Journal(*journal)}

	var out result
	switch os.Args[1] {
	case "seq":
		for i := 0; i < *warmup; i++ {
			mustAppend(ctx, rjc, req, record)
		}
		start := time.Now()
		for i := 0; i < *count; i++ {
			t0 := time.Now()
			mustAppend(ctx, rjc, req, record)
			out.LatenciesUs = append(out.LatenciesUs, time.Since(t0).Microseconds())
		}
		out.Seconds = time.Since(start).Seconds()
	case "rate":
		out = fixedRate(ctx, rjc, req, record, *rate, *warmupSeconds, *seconds)
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
	out.Count = len(out.LatenciesUs)
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		panic(err)
	}
}

func mustAppend(ctx context.Context, rjc pb.RoutedJournalClient, req pb.AppendRequest, rec []byte) {
	if _, err := client.Append(ctx, rjc, req, bytes.NewReader(rec)); err != nil {
		panic(err)
	}
}

func fixedRate(ctx context.Context, rjc pb.RoutedJournalClient, req pb.AppendRequest,
	rec []byte, rate, warmup, seconds float64) result {
	as := client.NewAppendService(ctx, rjc)
	perSecond := rate / float64(len(rec))
	total := int((warmup + seconds) * perSecond)
	skip := int(warmup * perSecond)

	type done struct {
		aa *client.AsyncAppend
		at time.Time
	}
	doneCh := make(chan done, 1024)
	scheduled := make([]time.Time, 0, total)
	batchOf := make([]*client.AsyncAppend, 0, total)

	start := time.Now()
	ticker := time.NewTicker(time.Millisecond)
	var last *client.AsyncAppend
	watching := 0
	for sent := 0; sent < total; {
		<-ticker.C
		due := int(time.Since(start).Seconds() * perSecond)
		if due > total {
			due = total
		}
		for ; sent < due; sent++ {
			at := start.Add(time.Duration(float64(sent) / perSecond * float64(time.Second)))
			aa := as.StartAppend(req, nil)
			_, _ = aa.Writer().Write(rec)
			if err := aa.Release(); err != nil {
				panic(err)
			}
			if aa != last {
				last = aa
				watching++
				go func(aa *client.AsyncAppend) {
					<-aa.Done()
					doneCh <- done{aa, time.Now()}
				}(aa)
			}
			scheduled = append(scheduled, at)
			batchOf = append(batchOf, aa)
		}
	}
	ticker.Stop()
	end := time.Now()
	ackedAt := make(map[*client.AsyncAppend]time.Time, watching)
	for ; watching > 0; watching-- {
		d := <-doneCh
		if err := d.aa.Err(); err != nil {
			panic(err)
		}
		ackedAt[d.aa] = d.at
	}
	var out result
	for i := skip; i < len(scheduled); i++ {
		out.LatenciesUs = append(out.LatenciesUs, ackedAt[batchOf[i]].Sub(scheduled[i]).Microseconds())
	}
	out.Seconds = end.Sub(start).Seconds() - warmup
	return out
}
