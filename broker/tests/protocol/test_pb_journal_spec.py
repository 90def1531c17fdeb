"""JournalSpec rules, helpers and the path postfix template (broker.md §3.3)."""

import datetime

import pytest

from gazette.broker import protocol as pb


def _err(fn, *args) -> str:
    with pytest.raises(pb.ValidationError) as info:
        fn(*args)
    return str(info.value)


def _spec() -> pb.JournalSpec:
    return pb.JournalSpec(
        name="a/journal",
        replication=3,
        labels=pb.label_set([("aaa", "bbb")]),
        fragment=pb.JournalSpec.Fragment(
            length=1 << 18,
            compression_codec=pb.GZIP,
            stores=["s3://bucket/path/", "gs://other-bucket/path/"],
            refresh_interval=pb.duration_from_seconds(300),
            retention=pb.duration_from_seconds(365 * 24 * 3600),
            path_postfix_template='date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}',
        ),
        flags=pb.JournalSpec.O_RDWR,
        max_append_rate=12345,
    )


def _labels(*pairs: tuple[str, str]) -> pb.LabelSet:
    return pb.label_set(list(pairs))


CT, MT, MST = pb.LABEL_CONTENT_TYPE, pb.LABEL_MESSAGE_TYPE, pb.LABEL_MESSAGE_SUBTYPE


def _set(path: str, value):  # Returns a mutator of a fresh spec.
    def mutate(spec: pb.JournalSpec) -> None:
        *parents, leaf = path.split(".")
        target = spec
        for p in parents:
            target = getattr(target, p)
        if isinstance(value, (pb.LabelSet, pb.Duration)):
            getattr(target, leaf).CopyFrom(value)
        elif isinstance(value, list):
            del getattr(target, leaf)[:]
            getattr(target, leaf).extend(value)
        else:
            setattr(target, leaf, value)

    return mutate


SECOND = pb.duration_from_seconds

# Every rule of §3.3, in validation order, with its failing input and message.
CASES = [
    (_set("name", "/bad/name"), "Name: cannot begin with '/' (/bad/name)"),
    (_set("name", "a//journal"), "Name: must be a clean path (a//journal)"),
    (_set("name", "a/./journal"), "Name: must be a clean path (a/./journal)"),
    (_set("name", "../journal"), "Name: cannot have a '..' path segment (../journal)"),
    (_set("name", "zz"), "Name: invalid length (2; expected 4 <= length <= 512)"),
    (
        _set("name", "a/journal;disallowed/meta"),
        "Name cannot have a metadata path segment (;disallowed/meta; expected no segment)",
    ),
    (_set("replication", 0), "invalid Replication (0; expected 1 <= Replication <= 5)"),
    (_set("replication", 6), "invalid Replication (6; expected 1 <= Replication <= 5)"),
    (_set("replication", 1024), "invalid Replication (1024; expected 1 <= Replication <= 5)"),
    (
        _set("labels", pb.LabelSet(labels=[pb.Label(name="xxx xxx", value="v")])),
        "Labels.Labels[0].Name: not a valid token (xxx xxx)",
    ),
    (_set("labels", _labels(("name", "x"))), 'Labels cannot include label "name"'),
    (_set("labels", _labels(("name", ""))), 'Labels cannot include label "name"'),
    (_set("labels", _labels(("prefix", ""))), 'Labels cannot include label "prefix"'),
    (
        _set("labels", _labels((MT, "a"), (MT, "b"))),
        "Labels: expected single-value Label has multiple values (index 1; label app.gazette.dev/message-type value b)",
    ),
    (
        _set("labels", _labels((CT, "invalid/content/type"))),
        "Labels: parsing content-type: mime: unexpected content after media subtype",
    ),
    (_set("labels", _labels((CT, ""))), "Labels: parsing content-type: mime: no media type"),
    (_set("labels", _labels((CT, "/x"))), "Labels: parsing content-type: mime: no media type"),
    (
        _set("labels", _labels((CT, "text="))),
        "Labels: parsing content-type: mime: expected slash after first token",
    ),
    (
        _set("labels", _labels((CT, "text/"))),
        "Labels: parsing content-type: mime: expected token after slash",
    ),
    (
        _set("labels", _labels((MST, "subtype"))),
        "Labels: expected app.gazette.dev/message-type label alongside app.gazette.dev/message-subtype",
    ),
    (
        _set("labels", _labels((MST, "subtype"), (MT, "type"))),
        "Labels: expected content-type label alongside app.gazette.dev/message-type",
    ),
    (
        _set("fragment.length", 0),
        "Fragment: invalid Length (0; expected 1024 <= length <= 17179869184)",
    ),
    (
        _set("fragment.length", (1 << 34) + 1),
        "Fragment: invalid Length (17179869185; expected 1024 <= length <= 17179869184)",
    ),
    (_set("fragment.compression_codec", 9999), "Fragment.CompressionCodec: invalid value (9999)"),
    (_set("fragment.compression_codec", 0), "Fragment.CompressionCodec: invalid value (INVALID)"),
    (
        _set("fragment.stores", ["s3://bucket/path/", "invalid"]),
        "Fragment.Stores[1]: not absolute (invalid)",
    ),
    (
        _set("fragment.stores", ["gs:///baz/bing/"]),
        "Fragment.Stores[0]: missing bucket (gs:///baz/bing/)",
    ),
    (
        lambda s: (
            _set("fragment.stores", ["file:///a/root/"])(s),
            _set("fragment.compression_codec", pb.GZIP_OFFLOAD_DECOMPRESSION)(s),
        ),
        "Fragment: GZIP_OFFLOAD_DECOMPRESSION is incompatible with file:// stores (file:///a/root/)",
    ),
    (
        _set("fragment.refresh_interval", SECOND(0.001)),
        "Fragment: invalid RefreshInterval (1ms; expected 1s <= interval <= 24h0m0s)",
    ),
    (
        _set("fragment.refresh_interval", SECOND(25 * 3600)),
        "Fragment: invalid RefreshInterval (25h0m0s; expected 1s <= interval <= 24h0m0s)",
    ),
    (
        _set("fragment.refresh_interval", SECOND(0)),
        "Fragment: invalid RefreshInterval (0s; expected 1s <= interval <= 24h0m0s)",
    ),
    (
        _set("fragment.flush_interval", SECOND(1)),
        "Fragment: invalid FlushInterval (1s; expected >= 1m0s)",
    ),
    (
        _set("fragment.path_postfix_template", "{{ bad template"),
        "Fragment.PathPostfixTemplate: template: postfix:1: unclosed action",
    ),
    (
        _set("fragment.path_postfix_template", "{{ .Spool.Nope }}"),
        'Fragment.PathPostfixTemplate: template: postfix:1: executing "postfix" at <.Spool.Nope>: can\'t evaluate field Nope',
    ),
    (_set("flags", 3), "Flags: invalid combination (3)"),
    (_set("flags", 5), "Flags: invalid combination (5)"),
    (_set("flags", 6), "Flags: invalid combination (6)"),
    (_set("max_append_rate", -1), "invalid MaxAppendRate (-1; expected >= 0)"),
    (_set("suspend.offset", -1), "Suspend.Offset: invalid Offset (-1; expected >= 0)"),
    (_set("suspend.level", 12345), "Suspend.Level: invalid Level variant (12345)"),
]


def test_base_spec_is_valid() -> None:
    pb.validate(_spec())


@pytest.mark.parametrize(("mutate", "expect"), CASES, ids=[c[1][:60] for c in CASES])
def test_spec_rules(mutate, expect: str) -> None:
    spec = _spec()
    mutate(spec)
    assert _err(pb.validate, spec) == expect


@pytest.mark.parametrize(
    "mutate",
    [
        _set("labels", _labels((MT, "type"), (CT, pb.CONTENT_TYPE_JSON_LINES))),
        _set("labels", _labels((MST, "sub"), (MT, "type"), (CT, pb.CONTENT_TYPE_JSON_LINES))),
        _set("labels", _labels((CT, "text"))),  # A bare type is a media type to Go.
        _set("labels", _labels((CT, "TEXT/CSV"))),
        _set("labels", _labels((pb.LABEL_TAG, "a"), (pb.LABEL_TAG, "b"))),
        _set("fragment.stores", []),
        _set("fragment.compression_codec", pb.GZIP_OFFLOAD_DECOMPRESSION),  # s3 store first.
        _set("fragment.flush_interval", SECOND(60)),
        _set("fragment.refresh_interval", SECOND(1)),
        _set("fragment.refresh_interval", SECOND(24 * 3600)),
        _set("fragment.retention", SECOND(-1)),
        _set("fragment.path_postfix_template", ""),
        _set("flags", pb.JournalSpec.NOT_SPECIFIED),
        _set("flags", pb.JournalSpec.O_RDONLY),
        _set("flags", pb.JournalSpec.O_WRONLY),
        _set("max_append_rate", 0),
        _set("suspend.level", pb.JournalSpec.Suspend.FULL),
        _set("name", "a/b/c"),
        _set("name", "a.b/c"),
        _set("name", "a/b.c/d..e"),
    ],
)
def test_spec_accepts(mutate) -> None:
    spec = _spec()
    mutate(spec)
    pb.validate(spec)


def test_suspend_and_fragment_validate_alone() -> None:
    pb.validate(pb.JournalSpec.Suspend(level=pb.JournalSpec.Suspend.PARTIAL, offset=10))
    assert _err(pb.validate, pb.JournalSpec.Suspend(level=7)) == "Level: invalid Level variant (7)"
    pb.validate(_spec().fragment)
    assert _err(pb.validate, pb.JournalSpec.Fragment()).startswith("invalid Length (0;")


def test_flags_read_write() -> None:
    spec = pb.JournalSpec()
    for flag, read, write in [
        (pb.JournalSpec.NOT_SPECIFIED, True, True),
        (pb.JournalSpec.O_RDONLY, True, False),
        (pb.JournalSpec.O_WRONLY, False, True),
        (pb.JournalSpec.O_RDWR, True, True),
    ]:
        spec.flags = flag
        assert pb.journal_may_read(spec) is read
        assert pb.journal_may_write(spec) is write


def test_desired_replication() -> None:
    spec = _spec()
    assert pb.desired_replication(spec) == 3
    spec.suspend.level = pb.JournalSpec.Suspend.PARTIAL
    assert pb.desired_replication(spec) == 1
    spec.suspend.level = pb.JournalSpec.Suspend.FULL
    assert pb.desired_replication(spec) == 0
    spec.suspend.level = pb.JournalSpec.Suspend.NONE
    assert pb.desired_replication(spec) == 3
    assert pb.desired_replication(spec, max_replication=1) == 1


def test_label_set_ext() -> None:
    spec = pb.JournalSpec(name="path/to/my/journal", labels=pb.label_set([("hello", "world")]))
    assert pb.label_set_ext(spec) == pb.label_set(
        [("name", "path/to/my/journal"), ("hello", "world")]
    )


# --------------------------------------------------------------------------- postfix templates

T = datetime.datetime(2024, 3, 5, 7, 8, 9, 123456, tzinfo=datetime.UTC)


def _render(template: str, when: datetime.datetime = T) -> str:
    spec = _spec()
    frag = pb.Fragment(journal="a/journal", begin=10, end=20, compression_codec=pb.GZIP)
    return pb.render_postfix_template(template, spec, frag, when, pb.LabelSet())


@pytest.mark.parametrize(
    ("template", "out"),
    [
        ("", ""),
        ("literal/text", "literal/text"),
        ('date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}', "date=2024-03-05"),
        ('{{.Spool.FirstAppendTime.Format "15"}}', "07"),
        ("{{ .Name }}/{{ .Spool.Journal }}", "a/journal/a/journal"),
        ("{{ .Spool.Begin }}-{{ .Spool.End }}", "10-20"),
        ("{{ .Spool.CompressionCodec }}", "GZIP"),
        ("{{ .Replication }}/{{ .Flags }}/{{ .MaxAppendRate }}", "3/O_RDWR/12345"),
        ("{{ .Fragment.Length }}/{{ .Fragment.RefreshInterval }}", "262144/5m0s"),
        ("{{ .Suspend }}", "<nil>"),
        ("{{ .JournalSpec.Name }}", "a/journal"),
        ("{{ .Spool.Fragment.Begin }}", "10"),
        ("a {{- /* comment */ -}} b", "ab"),
        ("a  {{- .Spool.Begin }}  b", "a10  b"),
        ("{{ .Spool.FirstAppendTime.Year }}/{{ .Spool.FirstAppendTime.Month }}", "2024/March"),
        ("{{ .Spool.FirstAppendTime.YearDay }}/{{ .Spool.FirstAppendTime.Weekday }}", "65/Tuesday"),
        ("{{ .Spool.FirstAppendTime.Unix }}", "1709622489"),
        ("{{ .Spool.FirstAppendTime }}", "2024-03-05 07:08:09.123456 +0000 UTC"),
        ('{{ .Spool.FirstAppendTime.UTC.Format "Jan _2 06 3:04:05PM" }}', "Mar  5 24 7:08:09AM"),
        (
            '{{ .Spool.FirstAppendTime.Format "Monday January 2 002 __2" }}',
            "Tuesday March 5 065  65",
        ),
        (
            '{{ .Spool.FirstAppendTime.Format "2006-01-02T15:04:05.000Z07:00" }}',
            "2024-03-05T07:08:09.123Z",
        ),
        (
            '{{ .Spool.FirstAppendTime.Format "05.999999999 .000000 ,9 MST -0700 -07:00 pm" }}',
            "09.123456 .123456 ,1 UTC +0000 +00:00 am",
        ),
        ("{{ .Spool.FirstAppendTime.Format `dt=2006/01` }}", "dt=2024/03"),
        ('{{ .Spool.FirstAppendTime.Format "Janet Monsters Mondays" }}', "Janet Monsters Tuesdays"),
    ],
)
def test_render_postfix_template(template: str, out: str) -> None:
    assert _render(template) == out
    pb.validate_postfix_template(template)


def test_render_timezones() -> None:
    tz = datetime.timezone(datetime.timedelta(hours=-7, minutes=-30))
    when = datetime.datetime(2024, 1, 1, 23, 0, tzinfo=tz)
    assert _render('{{ .Spool.FirstAppendTime.Format "15 -0700 Z07:00 MST" }}', when) == (
        "23 -0730 -07:30 -0730"
    )
    assert _render('{{ .Spool.FirstAppendTime.UTC.Format "2006-01-02 15:04" }}', when) == (
        "2024-01-02 06:30"
    )
    naive = datetime.datetime(2024, 1, 1)  # Taken as UTC.
    assert _render('{{ .Spool.FirstAppendTime.Format "15 MST" }}', naive) == "00 UTC"


def test_zero_time_validation() -> None:
    # Validation runs the template over Go's zero time, 0001-01-01 UTC.
    assert (
        pb.format_go_time(datetime.datetime(1, 1, 1, tzinfo=datetime.UTC), "2006-01-02")
        == "0001-01-01"
    )


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{{ bad template", "template: postfix:1: unclosed action"),
        (
            "{{ if .Name }}x{{ end }}",
            "template: postfix:1: {{if}} actions are not supported (only field paths)",
        ),
        (
            "{{ .Name | printf }}",
            "template: postfix:1: pipelines are not supported ({{.Name | printf}})",
        ),
        (
            '{{ printf "%s" .Name }}',
            'template: postfix:1: unsupported action {{printf "%s" .Name}} (only field paths and time methods)',
        ),
        ("{{ $x }}", "template: postfix:1: variables are not supported ($x)"),
        ("{{ }}", "template: postfix:1: missing value for command"),
        (
            "a\n{{ .Nope }}",
            'template: postfix:2: executing "postfix" at <.Nope>: can\'t evaluate field Nope',
        ),
        (
            "{{ .Suspend.Level }}",
            'template: postfix:1: executing "postfix" at <.Suspend.Level>: nil pointer evaluating Level',
        ),
        (
            "{{ .Labels }}",
            'template: postfix:1: executing "postfix" at <.Labels>: printing a []Label value is not supported',
        ),
        (
            "{{ .Spool }}",
            'template: postfix:1: executing "postfix" at <.Spool>: printing a struct value is not supported',
        ),
        (
            "{{ .Spool.FirstAppendTime.Format }}",
            'template: postfix:1: executing "postfix" at <.Spool.FirstAppendTime.Format>: Format expects one layout argument',
        ),
        (
            "{{ .Spool.FirstAppendTime.Zone }}",
            'template: postfix:1: executing "postfix" at <.Spool.FirstAppendTime.Zone>: time method Zone is not supported',
        ),
        (
            '{{ .Name "x" }}',
            'template: postfix:1: executing "postfix" at <.Name>: .Name is not a method but has arguments',
        ),
        (
            "{{ .Name 12 }}",
            "template: postfix:1: unsupported argument in {{.Name 12}} (only string literals)",
        ),
    ],
)
def test_postfix_template_rejects(template: str, reason: str) -> None:
    assert _err(pb.validate_postfix_template, template) == reason
    spec = _spec()
    spec.fragment.path_postfix_template = template
    assert _err(pb.validate, spec) == "Fragment.PathPostfixTemplate: " + reason
