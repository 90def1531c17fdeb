"""Fixtures of the fragment tests: the S3 server seam (helpers live in fragment_helpers)."""

from gazette.broker.fragment.testing import s3_bucket, s3_server

__all__ = ["s3_bucket", "s3_server"]
