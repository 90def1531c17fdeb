// Command gazette-msg publishes and reads Gazette messages with Go's
// go.gazette.dev/core/message package, so that Python tests can check that
// the Python message layer, brokers and consumers interoperate with Go peers.
//
// Messages are JSON lines (journals labelled content-type:
// application/x-ndjson) of the Go struct
//
//	{"UUID": "<canonical v1 UUID>", "Seq": <int>, "Kind": "<string>"}
//
// Subcommands (every output line on stdout is one JSON document; logs go to stderr):
//
//	gazette-msg publish --broker http://127.0.0.1:8080 --journal a/j [--journal b/j ...]
//	    [--committed N] [--txn M] [--txns T] [--rollback K] [--pending P] [--seq-start S]
//
// publishes, in this order, with one message.Publisher (one producer ID) over
// client.NewAppendService, mapping message Seq round-robin over the journals:
//
//  1. N messages with PublishCommitted (Kind "committed");
//  2. T transactions of M messages each with PublishUncommitted (Kind "txn"),
//     each closed by BuildAckIntents and appending the intents;
//  3. K messages with PublishUncommitted (Kind "rollback") that are then
//     rolled back the way a consumer that crashed mid-transaction rolls them
//     back: the last transaction's ACK intents are appended again (a recovered
//     shard re-appends the intents of its last checkpoint), so readers see an
//     ACK whose clock is not above the producer's last ACK (needs T*M > 0);
//  4. P messages with PublishUncommitted (Kind "pending") never acknowledged.
//
// Seq numbers run from S upwards across all four groups. It waits for every
// append and prints {"producer", "journals", "committed", "txn", "rollback",
// "pending", "acks", "heads"} where heads maps each journal to its write head.
//
//	gazette-msg read --broker http://127.0.0.1:8080 --journal a/j
//	    [--offset 0] [--until-offset O] [--until-count C] [--block] [--timeout 30s]
//
// reads the journal with message.NewReadCommittedIter and message.NewSequencer
// and prints one line per delivered envelope — {"Journal", "Begin", "End",
// "UUID", "Producer", "Clock", "Flags", "Seq", "Kind"}; ACKs are delivered too,
// as Go's consumer sees them (it skips Flags == 2) — then a last line
// {"done": true, "reason", "delivered", "acks", "offsets", "producers"} with
// the Sequencer's checkpoint. It stops at the write head of a non-blocking
// read (OFFSET_NOT_YET_AVAILABLE, the default), at --until-offset (a blocking
// read with that EndOffset), or once --until-count non-ACK messages arrived
// (blocking). --timeout bounds the whole command.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/labels"
	"go.gazette.dev/core/message"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Msg is the message type of every journal this program writes or reads.
type Msg struct {
	UUID uuid.UUID
	Seq  int
	Kind string
}

func (m *Msg) GetUUID() message.UUID  { return m.UUID }
func (m *Msg) SetUUID(u message.UUID) { m.UUID = u }

// NewAcknowledgement returns the ACK carrier; Kind "ack" makes ACK frames
// easy to spot in raw journal bytes.
func (m *Msg) NewAcknowledgement(pb.Journal) message.Message { return &Msg{Kind: "ack"} }

type journalList []string

func (l *journalList) String() string     { return strings.Join(*l, ",") }
func (l *journalList) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: gazette-msg publish|read --broker URL --journal NAME ... (see -h)"))
	}
	var err error
	switch os.Args[1] {
	case "publish":
		err = publish(os.Args[2:])
	case "read":
		err = read(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (want publish or read)", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gazette-msg:", err)
	os.Exit(1)
}

// dial returns a routed journal client of the broker at endpoint (an
// http:// URL or host:port); without a route cache, brokers proxy.
func dial(ctx context.Context, endpoint string) (pb.RoutedJournalClient, error) {
	var addr = endpoint
	if strings.Contains(endpoint, "://") {
		addr = pb.Endpoint(endpoint).GRPCAddr()
	}
	var conn, err = grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)),
	)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", endpoint, err)
	}
	go func() { <-ctx.Done(); _ = conn.Close() }()
	return pb.NewRoutedJournalClient(pb.NewJournalClient(conn), pb.NoopDispatchRouter{}), nil
}

func emit(v any) {
	var b, err = json.Marshal(v)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(b))
}

func publish(args []string) error {
	var fs = flag.NewFlagSet("publish", flag.ExitOnError)
	var broker = fs.String("broker", "http://127.0.0.1:8080", "broker endpoint")
	var journals journalList
	fs.Var(&journals, "journal", "journal to publish to (repeatable; Seq maps round-robin)")
	var committed = fs.Int("committed", 0, "messages published committed (OUTSIDE_TXN)")
	var txn = fs.Int("txn", 0, "messages per acknowledged transaction (CONTINUE_TXN, then ACK_TXN)")
	var txns = fs.Int("txns", 1, "number of acknowledged transactions")
	var rollback = fs.Int("rollback", 0, "uncommitted messages rolled back by re-appending the last ACK intents")
	var pending = fs.Int("pending", 0, "uncommitted messages never acknowledged")
	var seqStart = fs.Int("seq-start", 0, "Seq of the first message")
	var timeout = fs.Duration("timeout", 60*time.Second, "bound on the whole command")
	_ = fs.Parse(args)

	if len(journals) == 0 {
		return fmt.Errorf("publish: at least one --journal is required")
	} else if *rollback > 0 && *txn**txns == 0 {
		return fmt.Errorf("publish: --rollback needs an acknowledged transaction (--txn > 0) to roll back to")
	}

	var ctx, cancel = context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var rjc, err = dial(ctx, *broker)
	if err != nil {
		return err
	}
	var as = client.NewAppendService(ctx, rjc)
	var pub = message.NewPublisher(as, nil)

	var seq = *seqStart
	var mapping = func(m message.Mappable) (pb.Journal, string, error) {
		var j = journals[m.(*Msg).Seq%len(journals)]
		return pb.Journal(j), labels.ContentType_JSONLines, nil
	}
	var counts = map[string]int{}
	var next = func(kind string, uncommitted bool) error {
		var msg = &Msg{Seq: seq, Kind: kind}
		seq++
		var err error
		if uncommitted {
			_, err = pub.PublishUncommitted(mapping, msg)
		} else {
			_, err = pub.PublishCommitted(mapping, msg)
		}
		counts[kind]++
		return err
	}
	var appendIntents = func(intents []message.AckIntent) {
		for _, i := range intents {
			var aa = as.StartAppend(pb.AppendRequest{Journal: i.Journal}, nil)
			_, _ = aa.Writer().Write(i.Intent)
			if err := aa.Release(); err != nil {
				fail(fmt.Errorf("appending ACK intent to %s: %w", i.Journal, err))
			}
			counts["ack"]++
		}
	}

	for i := 0; i != *committed; i++ {
		if err = next("committed", false); err != nil {
			return err
		}
	}
	var lastIntents []message.AckIntent
	for t := 0; t != *txns && *txn > 0; t++ {
		for i := 0; i != *txn; i++ {
			if err = next("txn", true); err != nil {
				return err
			}
		}
		if lastIntents, err = pub.BuildAckIntents(); err != nil {
			return fmt.Errorf("BuildAckIntents: %w", err)
		}
		// Intents alias one buffer per call: copy them, as they're appended
		// again below to roll back.
		for i := range lastIntents {
			lastIntents[i].Intent = append([]byte(nil), lastIntents[i].Intent...)
		}
		appendIntents(lastIntents)
	}
	if *rollback > 0 {
		for i := 0; i != *rollback; i++ {
			if err = next("rollback", true); err != nil {
				return err
			}
		}
		// Drop the intents of the rolled-back transaction (a crashed
		// consumer never wrote them) and re-append the previous ones, as a
		// recovered consumer does from its last checkpoint. Journals written
		// by the rolled-back span but not by the last transaction get no ACK
		// and stay pending.
		if _, err = pub.BuildAckIntents(); err != nil {
			return fmt.Errorf("BuildAckIntents: %w", err)
		}
		appendIntents(lastIntents)
	}
	for i := 0; i != *pending; i++ {
		if err = next("pending", true); err != nil {
			return err
		}
	}

	// Wait for every append; the last one of each journal tells its head.
	var heads = map[string]int64{}
	for op := range as.PendingExcept("") {
		if err := op.Err(); err != nil {
			return fmt.Errorf("append failed: %w", err)
		}
	}
	for _, j := range journals {
		var aa = as.StartAppend(pb.AppendRequest{Journal: pb.Journal(j)}, nil)
		if err := aa.Release(); err != nil {
			return err
		}
		if err := aa.Err(); err != nil {
			return fmt.Errorf("append to %s failed: %w", j, err)
		}
		heads[j] = aa.Response().Commit.End
	}
	var producer = pub.ProducerID()
	emit(map[string]any{
		"producer":  hex.EncodeToString(producer[:]),
		"journals":  journals,
		"committed": counts["committed"],
		"txn":       counts["txn"],
		"rollback":  counts["rollback"],
		"pending":   counts["pending"],
		"acks":      counts["ack"],
		"heads":     heads,
	})
	return nil
}

func read(args []string) error {
	var fs = flag.NewFlagSet("read", flag.ExitOnError)
	var broker = fs.String("broker", "http://127.0.0.1:8080", "broker endpoint")
	var journal = fs.String("journal", "", "journal to read")
	var offset = fs.Int64("offset", 0, "offset to read from")
	var untilOffset = fs.Int64("until-offset", 0, "read (blocking) through this end offset")
	var untilCount = fs.Int("until-count", 0, "read (blocking) until this many non-ACK messages arrived")
	var block = fs.Bool("block", false, "block at the write head (until --timeout)")
	var timeout = fs.Duration("timeout", 60*time.Second, "bound on the whole command")
	_ = fs.Parse(args)

	if *journal == "" {
		return fmt.Errorf("read: --journal is required")
	}
	var ctx, cancel = context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var rjc, err = dial(ctx, *broker)
	if err != nil {
		return err
	}
	var req = pb.ReadRequest{
		Journal:   pb.Journal(*journal),
		Offset:    *offset,
		EndOffset: *untilOffset,
		Block:     *block || *untilOffset != 0 || *untilCount != 0,
	}
	var rr = client.NewRetryReader(ctx, rjc, req)
	var seq = message.NewSequencer(nil, nil, 1024)
	var it = message.NewReadCommittedIter(rr,
		func(*pb.JournalSpec) (message.Message, error) { return new(Msg), nil }, seq)

	var delivered, acks int
	var reason string
	for reason == "" {
		var env, err = it.Next()
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			reason = "end-offset"
			continue
		case errors.Is(err, client.ErrOffsetNotYetAvailable):
			reason = "head"
			continue
		default:
			return fmt.Errorf("reading %s (delivered %d): %w", *journal, delivered, err)
		}
		var msg = env.Message.(*Msg)
		var producer = message.GetProducerID(msg.UUID)
		var flags = message.GetFlags(msg.UUID)
		emit(map[string]any{
			"Journal":  env.Journal.Name,
			"Begin":    env.Begin,
			"End":      env.End,
			"UUID":     msg.UUID.String(),
			"Producer": hex.EncodeToString(producer[:]),
			"Clock":    uint64(message.GetClock(msg.UUID)),
			"Flags":    uint16(flags),
			"Seq":      msg.Seq,
			"Kind":     msg.Kind,
		})
		if flags == message.Flag_ACK_TXN {
			acks++
		} else if delivered++; *untilCount != 0 && delivered >= *untilCount {
			reason = "count"
		}
	}

	var offsets, states = seq.Checkpoint(0)
	var producers []map[string]any
	for _, s := range states {
		producers = append(producers, map[string]any{
			"Journal":  s.Journal,
			"Producer": hex.EncodeToString(s.Producer[:]),
			"LastAck":  uint64(s.LastAck),
			"Begin":    s.Begin,
		})
	}
	sort.Slice(producers, func(i, j int) bool {
		return producers[i]["Producer"].(string) < producers[j]["Producer"].(string)
	})
	emit(map[string]any{
		"done":      true,
		"reason":    reason,
		"delivered": delivered,
		"acks":      acks,
		"offsets":   offsets,
		"producers": producers,
	})
	return nil
}
