// Command gazette-rlog records and plays Gazette recovery logs with Go's
// go.gazette.dev/core/consumer/recoverylog package, so that Python tests can
// check that our recorder and player read and write the same logs as Go's.
//
// Logs must be journals labelled content-type:application/x-gazette-recoverylog.
// Every output line on stdout is one JSON document; logs go to stderr.
//
//	gazette-rlog record --broker http://127.0.0.1:8080 --log recovery/a --dir /abs/dir
//	    [--author N] [--hints FILE] [--timeout 60s]
//
// recovers the log into DIR the way a Go shard does before it records:
// recoverylog.Player plays it (from FILE's FSMHints, or from the log's start)
// and hands it off to the author (InjectHandoff; random when N is 0), then a
// recoverylog.Recorder over the recovered FSM, wrapped in RecordedAferoFS
// around the OS file system, records into --log. FILE's hints may be of
// another log: the hand-off then goes to that log, and the Recorder fences
// --log with a no-op of its own before recording (as after a shard split),
// so its hints name segments of both logs. The Recorder records a fixed
// script of file operations (see script below: creates, several writes,
// WriteAt, truncation by re-create, renames onto a new and onto an existing
// path, a remove, a hard link and a rename onto the /IDENTITY property). It
// prints two lines: the FSMHints of Recorder.BuildHints exactly as
// encoding/json writes them (as Go shards store them in etcd), then
// {"author", "files"}, files as listed below.
//
//	gazette-rlog play --broker http://127.0.0.1:8080 --hints FILE|- --dir /abs/dir
//	    [--handoff N] [--timeout 60s]
//
// plays the log of the FSMHints JSON in FILE (or stdin) into DIR with
// recoverylog.Player: to the write head (FinishAtWriteHead, as `gazctl shards
// recover` does), or through a hand-off to author N when N is non-zero. It
// prints {"files", "next_seq_no", "next_checksum", "last_log", "hints"}:
// files maps each regular file under DIR (slash-separated, relative) to
// {"size", "sha256"}; hints are those of the recovered FSM.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/afero"
	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/consumer/recoverylog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: gazette-rlog record|play --broker URL ... (see -h)"))
	}
	var err error
	switch os.Args[1] {
	case "record":
		err = record(os.Args[2:])
	case "play":
		err = play(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (want record or play)", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gazette-rlog:", err)
	os.Exit(1)
}

func emit(v any) {
	var b, err = json.Marshal(v)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(b))
}

// appendService dials the broker at endpoint (an http:// URL or host:port)
// and returns an AppendService over it, the AsyncJournalClient that Go's
// Recorder and Player both take. With the no-op router, brokers proxy reads
// and appends to the journal's primary.
func appendService(ctx context.Context, endpoint string) (*client.AppendService, error) {
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
	var rjc = pb.NewRoutedJournalClient(pb.NewJournalClient(conn), pb.NoopDispatchRouter{})
	return client.NewAppendService(ctx, rjc), nil
}

// readHints reads FSMHints JSON from path ("-": stdin) and validates them as
// a Go shard would before playing them.
func readHints(path string) (recoverylog.FSMHints, error) {
	var hints recoverylog.FSMHints
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return hints, fmt.Errorf("reading hints: %w", err)
	} else if err = json.Unmarshal(b, &hints); err != nil {
		return hints, fmt.Errorf("decoding hints %q: %w", b, err)
	} else if err = hints.Validate(); err != nil {
		return hints, fmt.Errorf("validating hints: %w", err)
	}
	return hints, nil
}

// absDir is dir as the absolute, clean path NewRecorder insists on.
func absDir(dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("--dir is required")
	}
	var abs, err = filepath.Abs(dir)
	return filepath.Clean(abs), err
}

type fileInfo struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// listFiles maps every regular file under dir to its size and digest.
func listFiles(dir string) (map[string]fileInfo, error) {
	var out = map[string]fileInfo{}
	var err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		var b, rerr = os.ReadFile(path)
		if rerr != nil {
			return rerr
		}
		var rel, _ = filepath.Rel(dir, path)
		var sum = sha256.Sum256(b)
		out[filepath.ToSlash(rel)] = fileInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
		return nil
	})
	return out, err
}

func record(args []string) error {
	var fset = flag.NewFlagSet("record", flag.ExitOnError)
	var broker = fset.String("broker", "http://127.0.0.1:8080", "broker endpoint")
	var logName = fset.String("log", "", "recovery log journal")
	var dirFlag = fset.String("dir", "", "directory to recover into and record from")
	var authorFlag = fset.Uint("author", 0, "author of the recorder (0: random)")
	var hintsPath = fset.String("hints", "", "FSMHints JSON to recover from (default: the log's start)")
	var timeout = fset.Duration("timeout", 60*time.Second, "bound on the whole command")
	_ = fset.Parse(args)

	if *logName == "" {
		return fmt.Errorf("record: --log is required")
	}
	var dir, err = absDir(*dirFlag)
	if err != nil {
		return err
	}
	var hints = recoverylog.FSMHints{Log: pb.Journal(*logName)}
	if *hintsPath != "" {
		if hints, err = readHints(*hintsPath); err != nil {
			return err
		}
	}
	var author = recoverylog.Author(*authorFlag)
	if author == 0 {
		author = recoverylog.NewRandomAuthor()
	}

	var ctx, cancel = context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	as, err := appendService(ctx, *broker)
	if err != nil {
		return err
	}

	// Recover first, as consumer/recovery.go does: only the Player's hand-off
	// sets the log's "author" register, which each of the Recorder's appends
	// then checks.
	var player = recoverylog.NewPlayer()
	player.InjectHandoff(author)
	if err = player.Play(ctx, hints, dir, as); err != nil {
		return fmt.Errorf("playing %s: %w", hints.Log, err)
	}
	var rec = recoverylog.NewRecorder(pb.Journal(*logName), player.Resolved.FSM, author, dir, as)
	var rfs = recoverylog.RecordedAferoFS{Recorder: rec, Fs: afero.NewOsFs()}

	if err = script(rfs, dir); err != nil {
		return err
	}
	recorded, err := rec.BuildHints()
	if err != nil {
		return fmt.Errorf("BuildHints: %w", err)
	}
	files, err := listFiles(dir)
	if err != nil {
		return err
	}
	emit(recorded)
	emit(map[string]any{"author": uint32(author), "files": files})
	return nil
}

// script is the store life recorded by `record`. Every call goes through the
// recording file system (or, for the hard link afero lacks, the Recorder
// itself) right after the OS did it, as a store's hooked environment does.
func script(rfs recoverylog.RecordedAferoFS, dir string) error {
	var p = func(rel string) string { return filepath.Join(dir, rel) }
	// create opens rel with Create (O_CREATE|O_TRUNC: recorded as an unlink of
	// a file already there, then a create) and writes chunks in order.
	var create = func(rel string, chunks ...string) error {
		var f, err = rfs.Create(p(rel))
		if err != nil {
			return err
		}
		for _, c := range chunks {
			if _, err = f.WriteString(c); err != nil {
				return err
			}
		}
		if err = f.Sync(); err != nil { // A Recorder barrier.
			return err
		}
		return f.Close()
	}
	// writeFile is create of a path nothing is at: it first removes a file
	// there (recovered from an earlier recording), as truncating it in place
	// would also truncate its other hard links on disk, but not in the log.
	var writeFile = func(rel string, chunks ...string) error {
		if _, err := os.Lstat(p(rel)); err == nil {
			if err = rfs.Remove(p(rel)); err != nil {
				return err
			}
		}
		return create(rel, chunks...)
	}
	var steps = []func() error{
		// One file, several sequential writes.
		func() error { return writeFile("a.txt", "hello ", "go ", "world\n") },
		// Random-access writes in a subdirectory (directories are implied by paths).
		func() error {
			if err := rfs.MkdirAll(p("sub"), 0o777); err != nil {
				return err
			}
			var f, err = rfs.OpenFile(p("sub/b.bin"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
			if err != nil {
				return err
			}
			var block = make([]byte, 256)
			for i := range block {
				block[i] = byte(i)
			}
			if _, err = f.WriteAt(block, 0); err != nil {
				return err
			} else if _, err = f.WriteAt([]byte("XYZ"), 10); err != nil {
				return err
			} else if _, err = f.WriteAt([]byte("tail"), 300); err != nil { // Leaves a hole.
				return err
			}
			return f.Close()
		},
		// Larger than a read chunk, in several writes.
		func() error {
			var chunks []string
			for c := 0; c != 3; c++ {
				var b = make([]byte, 70_000)
				for i := range b {
					b[i] = byte((i*7 + c*13) % 251)
				}
				chunks = append(chunks, string(b))
			}
			return writeFile("big.bin", chunks...)
		},
		// Written, then renamed into place; then again over the first.
		func() error { return writeFile("next.json", `{"v": 1}`) },
		func() error { return rfs.Rename(p("next.json"), p("state.json")) },
		func() error { return writeFile("next.json", `{"v": 2}`) },
		func() error { return rfs.Rename(p("next.json"), p("state.json")) },
		// Truncated by a second create of the same path (unlink, then create).
		func() error { return writeFile("trunc.txt", "first version, longer") },
		func() error { return create("trunc.txt", "second") },
		// A file that dies: players skip it.
		func() error { return writeFile("gone", strings.Repeat("x", 1000)) },
		func() error { return rfs.Remove(p("gone")) },
		// A second hard link of a.txt.
		func() error {
			var src, target = p("a.txt"), p("sub/a-link.txt")
			if _, err := os.Lstat(target); err == nil {
				if err = rfs.Remove(target); err != nil {
					return err
				}
			}
			if err := os.Link(src, target); err != nil {
				return err
			}
			rfs.RecordLink(src, target)
			return nil
		},
		// A rename onto /IDENTITY records a property (its content) instead of a link.
		func() error { return writeFile("IDENTITY.tmp", "go-identity-0001\n") },
		func() error { return rfs.Rename(p("IDENTITY.tmp"), p("IDENTITY")) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("script step %d: %w", i, err)
		}
	}
	return nil
}

func play(args []string) error {
	var fset = flag.NewFlagSet("play", flag.ExitOnError)
	var broker = fset.String("broker", "http://127.0.0.1:8080", "broker endpoint")
	var hintsPath = fset.String("hints", "-", "FSMHints JSON file, or - for stdin")
	var dirFlag = fset.String("dir", "", "directory to play into (emptied first)")
	var handoff = fset.Uint("handoff", 0, "author to hand off to (0: stop at the write head)")
	var timeout = fset.Duration("timeout", 60*time.Second, "bound on the whole command")
	_ = fset.Parse(args)

	var dir, err = absDir(*dirFlag)
	if err != nil {
		return err
	}
	hints, err := readHints(*hintsPath)
	if err != nil {
		return err
	}
	var ctx, cancel = context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	as, err := appendService(ctx, *broker)
	if err != nil {
		return err
	}

	var player = recoverylog.NewPlayer()
	if *handoff != 0 {
		player.InjectHandoff(recoverylog.Author(*handoff))
	} else {
		player.FinishAtWriteHead()
	}
	if err = player.Play(ctx, hints, dir, as); err != nil {
		return fmt.Errorf("playing %s: %w", hints.Log, err)
	}
	var fsm = player.Resolved.FSM
	files, err := listFiles(dir)
	if err != nil {
		return err
	}
	emit(map[string]any{
		"files":         files,
		"next_seq_no":   fsm.NextSeqNo,
		"next_checksum": fsm.NextChecksum,
		"last_log":      fsm.LastLog,
		"hints":         fsm.BuildHints(fsm.LastLog),
	})
	return nil
}
