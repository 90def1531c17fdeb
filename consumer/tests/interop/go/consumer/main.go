// Command gazette-consumer is Gazette's own consumer process (runconsumer of
// go.gazette.dev/core) serving an application that never runs a shard: the
// interop tests apply only disabled shards, and use its consumer.Shard API and
// its checks of Authorization tokens (--consumer.auth-keys) against our gazctl.
//
//	gazette-consumer serve --etcd.address=... --etcd.prefix=... --consumer.port=...
package main

import (
	"errors"

	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/consumer"
	"go.gazette.dev/core/consumer/recoverylog"
	"go.gazette.dev/core/mainboilerplate/runconsumer"
	"go.gazette.dev/core/message"
)

var errDisabled = errors.New("gazette-consumer serves no shard: apply only disabled shards")

type config struct {
	runconsumer.BaseConfig
}

type noShards struct{}

func (noShards) NewConfig() runconsumer.Config { return new(config) }

func (noShards) InitApplication(runconsumer.InitArgs) error { return nil }

func (noShards) NewStore(consumer.Shard, *recoverylog.Recorder) (consumer.Store, error) {
	return nil, errDisabled
}

func (noShards) NewMessage(*pb.JournalSpec) (message.Message, error) { return nil, errDisabled }

func (noShards) ConsumeMessage(consumer.Shard, consumer.Store, message.Envelope, *message.Publisher) error {
	return errDisabled
}

func (noShards) FinalizeTxn(consumer.Shard, consumer.Store, *message.Publisher) error {
	return errDisabled
}

func main() { runconsumer.Main(noShards{}) }
