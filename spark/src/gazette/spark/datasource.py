"""``GazetteDataSource``: the ``gazette`` format of ``spark.read``, ``readStream`` and ``write``.

Spark builds one instance per ``load()`` / ``save()`` with the user's options
(in a Python worker), asks it for the schema and a reader or writer, and
pickles what those return to the executors. The batch reader lives in
:mod:`gazette.spark.reader`; the stream reader and the sinks in
``gazette.spark.stream`` and ``gazette.spark.sink``, imported when first asked
for so that a batch read never loads them.
"""

from __future__ import annotations

from pyspark.sql import datasource as ds
from pyspark.sql import types as st

from gazette.spark import options, reader

__all__ = ["GazetteDataSource"]


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
