from __future__ import annotations

import pytest

from gazette.operator import config


def test_flags() -> None:
    cfg = config.parse_args(
        [
            "--etcd.address=http://127.0.0.1:2399",
            "--etcd.prefix=/a/cluster",
            "--consumers.prefix=/a/consumers",
            "--cluster=blue",
            "--namespace=one",
            "--namespace=two",
            "--shard-status-interval=5",
            # Accepted and ignored: a watch, not a timer, catches out-of-band edits.
            "--resync-interval=5",
        ],
        environ={},
    )
    assert cfg.etcd_address == "http://127.0.0.1:2399"
    assert cfg.namespaces == ("one", "two")
    assert cfg.handlers.cluster == "blue"
    assert cfg.handlers.status_interval == 5
    assert not hasattr(cfg.handlers, "resync_interval")
    assert cfg.handlers.reconcile.broker_root == "/a/cluster"
    assert cfg.handlers.reconcile.consumers_root == "/a/consumers"


def test_environment_defaults() -> None:
    cfg = config.parse_args(
        [], environ={"ETCD_ADDRESS": "http://etcd:2379", "WATCH_NAMESPACES": "a,b"}
    )
    assert (cfg.etcd_address, cfg.namespaces) == ("http://etcd:2379", ("a", "b"))
    assert cfg.handlers.reconcile.broker_root == "/gazette/cluster"


@pytest.mark.parametrize(
    "argv",
    [
        [],  # neither namespaces nor all
        ["--all-namespaces", "--namespace=a"],
        ["--all-namespaces", "--etcd.prefix=/trailing/"],
        ["--all-namespaces", "--consumers.prefix=relative"],
        ["--all-namespaces", "--retry-delay=0"],
        ["--all-namespaces", "--shard-status-interval=0"],
    ],
)
def test_bad_flags_exit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config.parse_args(argv, environ={})
    assert "error" in capsys.readouterr().err
