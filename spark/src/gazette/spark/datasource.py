"""``GazetteDataSource``: the ``gazette`` format of ``spark.read``, ``readStream`` and ``write``.

Spark builds one instance per ``load()`` / ``save()`` with the user's options
(in a Python worker), asks it for the schema and a reader or writer, and
pickles what those return to the executors. The batch reader lives in
:mod:`gazette.spark.reader`; the stream reader and the sinks in
``gazette.spark.stream`` and ``gazette.spark.sink``, imported when first asked
for so that a batch read never loads them.
"""

from __future__ import annotations

import functools
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import datasource as ds
from pyspark.sql import readwriter
from pyspark.sql import types as st

from gazette.spark import options, reader

__all__ = ["GazetteDataSource", "explain_save_modes"]

#: The condition of Spark's refusal of a save mode a Python data source can't honour.
SAVE_MODE_CONDITION = "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"


class GazetteDataSource(ds.DataSource):
    """Journals selected by a label selector, as a DataFrame; and a sink appending to them."""

    @classmethod
    def name(cls) -> str:
        return "gazette"

    def schema(self) -> st.StructType | str:
        # Lenient: schema() serves stream readers too, whose extra options it doesn't know.
        return reader.infer_schema(options.SourceOptions.parse(self.options, strict=False))

    def reader(self, schema: st.StructType) -> ds.DataSourceReader:
        return reader.GazetteReader(options.SourceOptions.parse(self.options), schema)

    def streamReader(self, schema: st.StructType) -> ds.DataSourceStreamReader:
        from gazette.spark import stream

        return stream.GazetteStreamReader(self.options, schema)

    def writer(self, schema: st.StructType, overwrite: bool) -> ds.DataSourceWriter:
        from gazette.spark import sink

        return sink.GazetteWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: st.StructType, overwrite: bool) -> ds.DataSourceStreamWriter:
        from gazette.spark import sink

        return sink.GazetteStreamWriter(self.options, schema, overwrite)


def explain_save_modes() -> None:
    """Make ``df.write.format("gazette").save()`` without ``.mode("append")`` say so.

    Spark's default save mode is ``ErrorIfExists``, which the JVM refuses for every
    Python data source before asking it anything (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``,
    naming neither the sink nor the fix). No hook of the data source API runs first,
    so ``DataFrameWriter.save`` is wrapped, once per process: that refusal, for the
    ``gazette`` source only, becomes an :class:`~gazette.spark.options.OptionError`
    naming ``.mode("append")``; every other outcome passes through untouched.
    """
    writer: Any = readwriter.DataFrameWriter
    if getattr(writer.save, "_gazette_save_modes", False):
        return
    save = writer.save

    @functools.wraps(save)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            save(self, *args, **kwargs)
        except AnalysisException as e:
            params = e.getMessageParameters() or {}
            source = params.get("source", "").strip('`"')
            if e.getCondition() != SAVE_MODE_CONDITION or source != GazetteDataSource.name():
                raise
            mode = params.get("createMode", "").strip('`"') or "ErrorIfExists"
            raise options.OptionError(
                "mode",
                f"the gazette sink appends to journals, so its save mode is append, not "
                f'{mode}: df.write.format("gazette").mode("append")',
            ) from e

    checked._gazette_save_modes = True  # type: ignore[attr-defined]
    writer.save = checked
