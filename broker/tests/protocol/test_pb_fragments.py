"""Fragments, their names and paths, SHA1Sum, codecs, stores and endpoints (broker.md §2.2, §4.1, §5.1)."""

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gazette.broker import protocol as pb


def _err(fn, *args, **kwargs) -> str:
    with pytest.raises(pb.ValidationError) as info:
        fn(*args, **kwargs)
    return str(info.value)


DIGEST = bytes(range(1, 21))


def _frag(**kw) -> pb.Fragment:
    base = {
        "journal": "a/journal",
        "begin": 1234567890,
        "end": (1 << 63) - 1,
        "sum": pb.sha1sum_from_digest(DIGEST),
        "compression_codec": pb.GZIP,
    }
    base.update(kw)
    return pb.Fragment(**base)


def test_sha1sum() -> None:
    s = pb.sha1sum_from_digest(DIGEST)
    assert s.part1 == 0x0102030405060708
    assert s.part2 == 0x090A0B0C0D0E0F10
    assert s.part3 == 0x11121314
    assert pb.sha1sum_to_digest(s) == DIGEST
    assert pb.sha1sum_hex(s) == DIGEST.hex()
    digest = hashlib.sha1(b"hello").digest()
    assert pb.sha1sum_hex(pb.sha1sum_from_digest(digest)) == hashlib.sha1(b"hello").hexdigest()
    assert pb.sha1sum_hex(pb.SHA1Sum()) == "0" * 40
    with pytest.raises(ValueError, match="20-byte"):
        pb.sha1sum_from_digest(b"short")


def test_content_name_and_path() -> None:
    f = _frag()
    name = "00000000499602d2-7fffffffffffffff-0102030405060708090a0b0c0d0e0f1011121314.gz"
    assert pb.fragment_content_name(f) == name
    assert pb.fragment_path(f) == "a/journal/" + name
    f.path_postfix = "date=2024-01-02/hour=03"
    assert pb.fragment_path(f) == "a/journal/date=2024-01-02/hour=03/" + name
    assert pb.fragment_content_name(_frag(compression_codec=pb.NONE)).endswith("1314.raw")
    assert pb.fragment_content_name(_frag(compression_codec=pb.ZSTANDARD)).endswith("1314.zst")
    assert pb.fragment_content_name(_frag(compression_codec=pb.SNAPPY)).endswith("1314.sz")
    assert pb.fragment_content_name(
        _frag(compression_codec=pb.GZIP_OFFLOAD_DECOMPRESSION)
    ).endswith("1314")
    empty = _frag(begin=0, end=0, sum=pb.SHA1Sum(), compression_codec=pb.NONE)
    assert pb.fragment_content_name(empty) == (
        "0000000000000000-0000000000000000-0000000000000000000000000000000000000000.raw"
    )


@pytest.mark.parametrize(
    ("ext", "codec"),
    [
        (".raw", pb.NONE),
        (".RAW", pb.NONE),
        (".gz", pb.GZIP),
        (".gzip", pb.GZIP),
        (".GZ", pb.GZIP),
        (".zst", pb.ZSTANDARD),
        (".zstandard", pb.ZSTANDARD),
        (".sz", pb.SNAPPY),
        (".snappy", pb.SNAPPY),
        (".SnApPy", pb.SNAPPY),
        ("", pb.GZIP_OFFLOAD_DECOMPRESSION),
        (".gzod", pb.GZIP_OFFLOAD_DECOMPRESSION),
    ],
)
def test_codec_extensions(ext: str, codec: int) -> None:
    assert pb.codec_from_extension(ext) == codec
    assert pb.CODEC_EXTENSIONS[ext.lower()] == codec
    # And the file name parses with it.
    f = pb.parse_fragment_path("a/journal/" + "0" * 16 + "-" + "0" * 16 + "-" + "0" * 40 + ext)
    assert f.compression_codec == codec


def test_codec_errors() -> None:
    assert _err(pb.codec_from_extension, ".bz2") == "unrecognized compression extension: .bz2"
    assert _err(pb.validate_codec, 0) == "invalid value (INVALID)"
    assert _err(pb.validate_codec, 9999) == "invalid value (9999)"
    for codec in (pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION):
        pb.validate_codec(codec)
    assert pb.codec_to_extension(pb.GZIP_OFFLOAD_DECOMPRESSION) == ""
    with pytest.raises(ValueError):
        pb.codec_to_extension(pb.INVALID)


@pytest.mark.parametrize(
    ("frag", "expect"),
    [
        (_frag(), None),
        (_frag(path_postfix="a=1/b=2"), None),
        (_frag(begin=5, end=5), None),
        (_frag(journal="/bad"), "Journal: cannot begin with '/' (/bad)"),
        (_frag(journal="a/journal;meta"), None),  # Like any journal field, meta is allowed.
        (_frag(begin=6, end=5), "expected Begin <= End (have 6, 5)"),
        (_frag(compression_codec=pb.INVALID), "CompressionCodec: invalid value (INVALID)"),
        (_frag(compression_codec=77), "CompressionCodec: invalid value (77)"),
        (_frag(path_postfix="/abs"), "PathPostfix: cannot begin with '/' (/abs)"),
        (_frag(path_postfix="a//b"), "PathPostfix: must be a clean path (a//b)"),
        (_frag(path_postfix="a b"), "PathPostfix: not a valid token (a b)"),
        (
            _frag(path_postfix="p" * 513),
            "PathPostfix: invalid length (513; expected 0 <= length <= 512)",
        ),
    ],
)
def test_fragment_validation(frag: pb.Fragment, expect: str | None) -> None:
    if expect is None:
        pb.validate(frag)
    else:
        assert _err(pb.validate, frag) == expect
        assert _err(pb.validate_fragment, frag) == expect


NAME = "00000000499602d2-7fffffffffffffff-0102030405060708090a0b0c0d0e0f1011121314"


def test_parse_relative_paths() -> None:
    f = pb.parse_fragment_path("a=1/b=2/" + NAME + ".gz", journal="a/journal")
    assert f == _frag(path_postfix="a=1/b=2")
    f = pb.parse_fragment_path(NAME + ".raw", journal="a/journal")
    assert f == _frag(compression_codec=pb.NONE)
    f = pb.parse_fragment_path("a/journal/" + NAME + ".gz")
    assert f == _frag()


@pytest.mark.parametrize(
    ("path", "expect"),
    [
        ("0-1.gz", "wrong Fragment format: 0-1"),
        ("0-1-2-3.gz", "wrong Fragment format: 0-1-2-3"),
        ("zz-1-" + "00" * 20 + ".gz", 'Begin: strconv.ParseInt: parsing "zz": invalid syntax'),
        ("-1-" + "00" * 20 + ".gz", 'Begin: strconv.ParseInt: parsing "": invalid syntax'),
        ("0-xyz-" + "00" * 20 + ".gz", 'End: strconv.ParseInt: parsing "xyz": invalid syntax'),
        (
            "0-8000000000000000-" + "00" * 20 + ".gz",
            'End: strconv.ParseInt: parsing "8000000000000000": value out of range',
        ),
        ("0-1-" + "0g" + "00" * 19 + ".gz", "Sum: encoding/hex: invalid byte: U+0067 'g'"),
        ("0-1-" + "0" * 39 + ".gz", "Sum: encoding/hex: odd length hex string"),
        ("0-1-" + "0" * 38 + "z.gz", "Sum: encoding/hex: invalid byte: U+007A 'z'"),
        ("0-1-" + "00" * 19 + ".gz", "invalid SHA1Sum length: " + "00" * 19),
        ("0-1-" + "00" * 20 + ".bz2", "unrecognized compression extension: .bz2"),
        ("2-1-" + "00" * 20 + ".gz", "expected Begin <= End (have 2, 1)"),
        ("bad postfix/0-1-" + "00" * 20 + ".gz", "PathPostfix: not a valid token (bad postfix)"),
    ],
)
def test_parse_errors(path: str, expect: str) -> None:
    assert _err(pb.parse_fragment_path, path, journal="a/journal") == expect


def test_parse_journal_errors() -> None:
    assert (
        _err(pb.parse_fragment_path, "x/" + NAME + ".gz")
        == "Journal: invalid length (1; expected 4 <= length <= 512)"
    )
    with pytest.raises(pb.ValidationError, match="wrong Fragment path"):
        pb.parse_fragment_path(NAME + ".gz")


_journals = (
    st.lists(
        st.text(st.sampled_from([*list("abc09-_+.=%"), "é"]), min_size=1, max_size=6).filter(
            lambda s: s not in (".", "..")
        ),
        min_size=1,
        max_size=3,
    )
    .map("/".join)
    .filter(lambda j: len(j.encode()) >= 4)
)
_postfixes = st.one_of(
    st.just(""),
    st.lists(st.text(st.sampled_from(list("abc09-_+=%")), min_size=1, max_size=6), max_size=3).map(
        "/".join
    ),
)
_codecs = st.sampled_from(
    [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]
)
_offsets = st.integers(0, (1 << 63) - 1)


@st.composite
def _fragments(draw: st.DrawFn) -> pb.Fragment:
    a, b = sorted((draw(_offsets), draw(_offsets)))
    return pb.Fragment(
        journal=draw(_journals),
        begin=a,
        end=b,
        sum=pb.sha1sum_from_digest(draw(st.binary(min_size=20, max_size=20))),
        compression_codec=draw(_codecs),
        path_postfix=draw(_postfixes),
    )


@given(_fragments())
def test_fragment_path_round_trip(f: pb.Fragment) -> None:
    pb.validate(f)
    path = pb.fragment_path(f)
    # Stores list paths relative to `<journal>/`.
    assert path.startswith(f.journal + "/")
    assert pb.parse_fragment_path(path[len(f.journal) + 1 :], journal=f.journal) == f
    if not f.path_postfix:
        assert pb.parse_fragment_path(path) == f


@pytest.mark.parametrize(
    ("url", "expect"),
    [
        ("s3://my-bucket/path/", None),
        ("s3://my-bucket/", None),
        ("s3://my-bucket/path/?profile=a-profile&endpoint=http://x", None),
        ("gs://bucket/path/", None),
        ("azure://container/path/", None),
        ("azure-ad://tenant-id/storage-account/container/path/", None),
        ("file:///mnt/path/", None),
        ("file:///", None),
        ("S3://Bucket/p/", None),  # The scheme is case-insensitive.
        ("gs:///baz/bing/", "missing bucket (gs:///baz/bing/)"),
        ("s3:///baz/", "missing bucket (s3:///baz/)"),
        ("azure:///baz/", "missing bucket (azure:///baz/)"),
        ("azure-ad:///acct/cont/", "missing tenant ID (azure-ad:///acct/cont/)"),
        ("azure-ad://tenant//cont/", "missing storage account (azure-ad://tenant//cont/)"),
        ("azure-ad://tenant/acct//", "missing storage container (azure-ad://tenant/acct//)"),
        ("azure-ad://tenant/acct", "missing storage container (azure-ad://tenant/acct)"),
        ("file://host/mnt/path/", "file scheme cannot have host (file://host/mnt/path/)"),
        ("foobar://baz/", "invalid scheme (foobar)"),
        ("/mnt/path/", "not absolute (/mnt/path/)"),
        ("file:///mnt/path", "path component doesn't end in '/' (/mnt/path)"),
        ("s3://my-bucket", "path component doesn't end in '/' ()"),
        ("s3://my-bucket/a%zz/", 'parse "s3://my-bucket/a%zz/": invalid URL escape "%zz"'),
        (":foo", 'parse ":foo": missing protocol scheme'),
        ("s3://bu cket/", 'parse "s3://bu cket/": invalid character " " in host name'),
        ("s3://bucket:port/", 'parse "s3://bucket:port/": invalid port ":port" after host'),
        (
            "s3://bucket/\x7f/",
            'parse "s3://bucket/\\x7f/": net/url: invalid control character in URL',
        ),
    ],
)
def test_fragment_stores(url: str, expect: str | None) -> None:
    if expect is None:
        pb.validate_fragment_store(url)
    else:
        assert _err(pb.validate_fragment_store, url) == expect


@pytest.mark.parametrize(
    ("url", "expect", "addr"),
    [
        ("http://host:8080", None, "host:8080"),
        ("http://host", None, "host:80"),
        ("https://host", None, "host:443"),
        ("https://host:9443/path", None, "host:9443"),
        ("unix://host/tmp/socket", None, "unix:///tmp/socket"),
        ("http://[::1]:8080", None, "[::1]:8080"),
        ("invalid", "not absolute: invalid", None),
        ("http:///path", "missing host: http:///path", None),
        ("http:opaque", "missing host: http:opaque", None),
        ("http://host:port", 'parse "http://host:port": invalid port ":port" after host', None),
        ("http://[::1", "parse \"http://[::1\": missing ']' in host", None),
        (
            "1http://host",
            'parse "1http://host": first path segment in URL cannot contain colon',
            None,
        ),
    ],
)
def test_endpoints(url: str, expect: str | None, addr: str | None) -> None:
    if expect is None:
        pb.validate_endpoint(url)
        assert pb.endpoint_grpc_addr(url) == addr
    else:
        assert _err(pb.validate_endpoint, url) == expect
