"""PySpark integration: Arrow UDFs over the Rust codecs, scheduling every row of a DataFrame,
and reading the reports and scheduler-state topics.

The UDFs are Spark 4 Arrow UDFs (:func:`pyspark.sql.functions.arrow_udf`): Spark hands each
Python worker whole Arrow batches (``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, 10,000
by default) and each batch is **one** call into Rust, with the GIL released, through
:mod:`ferrokafka.arrow`. No per-row Python object is made.

A row that cannot be processed never fails the task unless asked: the zlib UDFs give null
(``errors="null"``), or ``struct<value, error>`` (``errors="struct"``); the decoders' structs
carry an ``error`` field; ``errors="raise"`` fails the task with the row's error instead (its
row number counts within the Arrow batch).

Executors fork their Python workers, so nothing Kafka-related is created at import time: the
UDFs only need ``ferrokafka`` installed on the executors, and the helpers that need Kafka
metadata create a :class:`ferrokafka.Client` on the driver when called.

Kafka I/O of the helpers goes through Spark's own Kafka connector; start Spark with
``--packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``.

Example:
    >>> from pyspark.sql import functions as F
    >>> from ferrokafka import spark as fks
    >>> df = spark.createDataFrame([(b'{"a": 1}',)], ["json"])
    >>> df.select(fks.inflate(fks.deflate("json")).alias("same")).first().same
    b'{"a": 1}'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ferrokafka._extras import missing_extra

try:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.pandas import functions as _pandas_functions
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamReader
    from pyspark.sql.types import DataType
except ModuleNotFoundError as e:
    raise missing_extra("ferrokafka.spark", "spark", e) from e

from ferrokafka import arrow as _arrow
from ferrokafka._native import WATERDROP_MAX_PAYLOAD_SIZE
from ferrokafka.arrow import DEFAULT_MAX_INFLATED, PartitionKeyHashing, StructErrors, ValueErrors
from ferrokafka.codecs import cancel_proxy

__all__ = [
    "cancel_dataframe",
    "decode_marker",
    "decode_report",
    "decode_state",
    "deflate",
    "inflate",
    "kafka_options",
    "read_reports",
    "read_states",
    "schedule_dataframe",
    "schedule_headers",
    "stream_lag",
]

ColumnOrName = Column | str


def _col(column: ColumnOrName) -> Column:
    return F.col(column) if isinstance(column, str) else column


def _spark_type(arrow_type: pa.DataType) -> DataType:
    return from_arrow_type(arrow_type)


def _arrow_udf(
    function: Callable[..., pa.Array], arrow_type: pa.DataType, name: str
) -> Callable[..., Column]:
    # Spark reads the kind of Arrow UDF (arrays to array) from the pa.Array type hints.
    function.__name__ = name
    # (pyspark's stub overloads list fixed arities only; the call is checked at run time.)
    factory: Any = _pandas_functions.arrow_udf
    udf: Callable[..., Column] = factory(function, _spark_type(arrow_type))
    return udf


def _value_type(errors: str, value: pa.DataType | None = None) -> pa.DataType:
    """The result type of a UDF whose rows are ``value`` (binary by default)."""
    value = pa.binary() if value is None else value
    if errors == "struct":
        return pa.struct([("value", value), ("error", pa.string())])
    if errors in ("null", "raise"):
        return value
    raise ValueError(f"errors must be 'null', 'struct' or 'raise', got {errors!r}")


def _decoder_udf(
    decode: Callable[..., pa.Array], column: ColumnOrName, errors: str, **options: int
) -> Column:
    """The struct column the :mod:`ferrokafka.arrow` decoder ``decode`` makes of ``column``
    (its Spark type: the decoder's result type on no rows)."""
    if errors not in ("field", "raise"):
        raise ValueError(f"errors must be 'field' or 'raise', got {errors!r}")

    def run(values: pa.Array) -> pa.Array:
        return decode(values, errors=errors, **options)

    arrow_type = decode(_empty_binary()).type
    return _arrow_udf(run, arrow_type, decode.__name__)(_col(column))


def _empty_binary() -> pa.Array:
    return pa.array([], pa.binary())


def inflate(
    column: ColumnOrName, *, max_output: int = DEFAULT_MAX_INFLATED, errors: ValueErrors = "null"
) -> Column:
    """Inflate a binary column of zlib streams (at most ``max_output`` bytes per row).

    Example:
        >>> import zlib
        >>> df = spark.createDataFrame([(zlib.compress(b"hi"),)], ["value"])
        >>> df.select(inflate("value").cast("string").alias("text")).first().text
        'hi'
    """

    def run(values: pa.Array) -> pa.Array:
        return _arrow.inflate(values, max_output=max_output, errors=errors)

    return _arrow_udf(run, _value_type(errors), "inflate")(_col(column))


def deflate(column: ColumnOrName, *, level: int = 6, errors: ValueErrors = "null") -> Column:
    """Deflate a binary or string column into zlib streams at ``level`` 0..9.

    Example:
        >>> import zlib
        >>> df = spark.createDataFrame([('{"a": 1}',)], ["json"])
        >>> zlib.decompress(df.select(deflate("json").alias("value")).first().value)
        b'{"a": 1}'
    """
    if not 0 <= level <= 9:
        raise ValueError(f"level must be an int from 0 to 9, got {level}")

    def run(values: pa.Array) -> pa.Array:
        return _arrow.deflate(values, level=level, errors=errors)

    return _arrow_udf(run, _value_type(errors), "deflate")(_col(column))


def decode_report(
    column: ColumnOrName,
    *,
    max_inflated: int = DEFAULT_MAX_INFLATED,
    errors: StructErrors = "field",
) -> Column:
    """Decode a column of zlib JSON process reports into a struct (fields: see
    :func:`ferrokafka.arrow.decode_report`).

    Example:
        >>> from ferrokafka.codecs import encode_process_report
        >>> df = spark.createDataFrame([(encode_process_report(report),)], ["value"])
        >>> decoded = df.select(decode_report("value").alias("r"))
        >>> decoded.select("r.process.id", "r.stats.lag").first()
        Row(id='host-1:4242:ab12cd', lag=3)
    """
    return _decoder_udf(_arrow.decode_report, column, errors, max_inflated=max_inflated)


def decode_state(
    column: ColumnOrName,
    *,
    max_inflated: int = DEFAULT_MAX_INFLATED,
    errors: StructErrors = "field",
) -> Column:
    """Decode a column of zlib JSON scheduler state reports into a struct (fields: see
    :func:`ferrokafka.arrow.decode_state`)."""
    return _decoder_udf(_arrow.decode_state, column, errors, max_inflated=max_inflated)


def decode_marker(column: ColumnOrName, *, errors: StructErrors = "field") -> Column:
    """Decode a column of redelivery markers (the markers topic) into a struct: ``kind``,
    ``partition``, ``offset``, ``deadline``, ``key``, ``value``, ``headers``, ``error``."""
    return _decoder_udf(_arrow.decode_marker, column, errors)


def schedule_headers(
    target_topic: ColumnOrName,
    epoch: ColumnOrName,
    key: ColumnOrName | None = None,
    partition: ColumnOrName | None = None,
    partition_key: ColumnOrName | None = None,
    payload_size: ColumnOrName | None = None,
    *,
    max_payload_size: int = WATERDROP_MAX_PAYLOAD_SIZE,
    errors: ValueErrors = "raise",
) -> Column:
    """The Kafka headers (``array<struct<key: string, value: binary>>``, the type of Spark's
    Kafka ``headers`` column) of the proxy message that schedules a row's message to
    ``target_topic`` at ``epoch`` (Unix seconds), with the optional target message ``key``,
    ``partition`` and ``partition_key``: exactly Karafka's ``schedule_*`` headers, built by the
    same Rust code as :func:`ferrokafka.scheduling.schedule`. A null topic or epoch, an epoch
    more than 10 s in the past, or a ``payload_size`` (bytes) over ``max_payload_size``
    (WaterDrop's default, 1,000,012) fails the task by default (``errors="raise"``).

    Example:
        >>> import time
        >>> df = spark.createDataFrame([("user-7", int(time.time()) + 60)], ["user", "epoch"])
        >>> headers = schedule_headers(F.lit("reminders"), "epoch", key="user")
        >>> [header.key for header in df.select(headers.alias("h")).first().h]
        ['schedule_schema_version', 'schedule_target_epoch', 'schedule_source_type',
         'schedule_target_topic', 'schedule_target_key']
    """

    def run(
        topics: pa.Array,
        epochs: pa.Array,
        keys: pa.Array,
        partitions: pa.Array,
        partition_keys: pa.Array,
        payload_sizes: pa.Array,
    ) -> pa.Array:
        return _arrow.schedule_headers(
            topics,
            epochs,
            keys,
            partitions,
            partition_keys,
            payload_sizes,
            max_payload_size=max_payload_size,
            errors=errors,
        )

    sample = _arrow.schedule_headers(pa.array([], pa.string()), pa.array([], pa.int64()))
    udf = _arrow_udf(run, _value_type(errors, sample.type), "schedule_headers")

    def optional(column: ColumnOrName | None, spark_type: str) -> Column:
        # An absent column is all nulls: the rows then have no such header.
        return (F.lit(None) if column is None else _col(column)).cast(spark_type)

    return udf(
        _col(target_topic).cast("string"),
        _col(epoch).cast("long"),
        optional(key, "string"),
        optional(partition, "long"),
        optional(partition_key, "string"),
        optional(payload_size, "long"),
    )


# ---- Kafka helpers (Spark's Kafka connector) -----------------------------------------------


ClientConfig = Mapping[str, str | int | float | bool]

# The Java client's login module for each SASL mechanism that takes a username and password.
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _jaas_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def kafka_options(config: ClientConfig) -> dict[str, str]:
    """Spark's Kafka source and sink options (``kafka.``-prefixed Java client settings) for the
    librdkafka settings ``config`` that every other ferrokafka component takes.

    Each key is passed as ``kafka.<key>``, except where the Java client names it differently:
    ``sasl.username``/``sasl.password`` become ``kafka.sasl.jaas.config`` (PLAIN and SCRAM),
    ``ssl.ca.location`` (a PEM file) becomes a PEM trust store, and
    ``ssl.endpoint.identification.algorithm=none`` the Java client's empty value. OAUTHBEARER's
    Java login settings (``kafka.sasl.jaas.config``, ``kafka.sasl.login.callback.handler.class``)
    have no librdkafka counterpart: give them in the helpers' own options.

    Example:
        >>> options = kafka_options({"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"})
        >>> options == {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "PEM",
        ...             "kafka.ssl.truststore.location": "/ca.pem"}
        True
    """
    settings = {key: str(value) for key, value in config.items()}
    options: dict[str, str] = {}
    username, password = settings.pop("sasl.username", None), settings.pop("sasl.password", None)
    if username is not None or password is not None:
        mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "GSSAPI"))
        module = _LOGIN_MODULES.get(mechanism.upper())
        if module is None:
            raise ValueError(
                f"sasl.username/sasl.password with sasl.mechanism={mechanism}: Spark's Kafka "
                "client takes them only for PLAIN and SCRAM; pass kafka.sasl.jaas.config instead"
            )
        options["kafka.sasl.jaas.config"] = (
            f"{module} required username={_jaas_quoted(username or '')} "
            f"password={_jaas_quoted(password or '')};"
        )
    for key, value in settings.items():
        if key == "sasl.mechanisms":
            options["kafka.sasl.mechanism"] = value
        elif key == "ssl.ca.location":
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = value
        elif key == "ssl.endpoint.identification.algorithm" and value.lower() == "none":
            options[f"kafka.{key}"] = ""
        else:
            options[f"kafka.{key}"] = value
    return options


def _kafka_options(
    bootstrap_servers: str | None,
    kafka_options_: Mapping[str, str] | None,
    config: ClientConfig | None = None,
) -> dict[str, str]:
    options = {**kafka_options(config or {}), **(kafka_options_ or {})}
    if bootstrap_servers is not None:
        options["kafka.bootstrap.servers"] = bootstrap_servers
    if "kafka.bootstrap.servers" not in options:
        raise ValueError("pass bootstrap_servers= or kafka.bootstrap.servers in kafka_options")
    return options


def _partition_count(
    options: Mapping[str, str], topic: str, config: ClientConfig | None, timeout: float = 30.0
) -> int:
    # A Kafka client on the driver, made when called (never at import, never on executors).
    from ferrokafka import Client

    client = Client({**(config or {}), "bootstrap.servers": options["kafka.bootstrap.servers"]})
    metadata = client.list_topics(timeout=timeout).topics.get(topic)
    if metadata is None or not metadata.partitions:
        raise ValueError(f"topic {topic!r} does not exist; create it first")
    return len(metadata.partitions)


def _partition_key_partitions(
    partition_keys: Column, partitions: int, partition_key_hashing: PartitionKeyHashing
) -> Column:
    """The partition each row's partition key chooses, by the Rust rule every ferrokafka
    producer uses (:func:`ferrokafka.arrow.partition_key_partitions`); null for a null key."""

    def run(values: pa.Array) -> pa.Array:
        return _arrow.partition_key_partitions(
            values, partitions, partition_key_hashing=partition_key_hashing
        )

    # Run once on the driver, so a bad rule name fails here rather than in a task.
    _arrow.partition_key_partitions(
        _empty_binary(), partitions, partition_key_hashing=partition_key_hashing
    )
    return _arrow_udf(run, pa.int64(), "partition_key_partitions")(partition_keys)


def _write_proxies(
    frame: DataFrame,
    topic: str,
    options: dict[str, str],
    partitions: int,
    partition_key_hashing: PartitionKeyHashing,
) -> None:
    # Partition as librdkafka's and Karafka's producers do, not as the Java producer (murmur2):
    # by the optional `partition_by` column (the proxy's partition_key) as WaterDrop hashes a
    # partition_key, else by CRC32 of all the key's bytes; so a cancel sent later by a Python
    # or Ruby producer lands in the partition of the schedule it cancels.
    partition = F.pmod(F.crc32(F.col("key").cast("binary")), F.lit(partitions))
    if "partition_by" in frame.columns:
        by_key = _partition_key_partitions(F.col("partition_by"), partitions, partition_key_hashing)
        partition = F.coalesce(by_key, partition)
    frame = frame.withColumn("partition", partition.cast("int"))
    (
        frame.drop("partition_by")
        .write.format("kafka")
        .options(**options)
        .option("topic", topic)
        .save()
    )


def schedule_dataframe(
    df: DataFrame,
    schedules_topic: str,
    epoch_col: ColumnOrName,
    *,
    target_topic: str | None = None,
    target_topic_col: ColumnOrName | None = None,
    value_col: ColumnOrName = "value",
    key_col: ColumnOrName | None = None,
    target_key_col: ColumnOrName | None = None,
    target_partition_col: ColumnOrName | None = None,
    target_partition_key_col: ColumnOrName | None = None,
    bootstrap_servers: str | None = None,
    kafka_options: Mapping[str, str] | None = None,
    partitions: int | None = None,
    config: ClientConfig | None = None,
    partition_key_hashing: PartitionKeyHashing = "waterdrop",
    max_payload_size: int = WATERDROP_MAX_PAYLOAD_SIZE,
) -> None:
    """Schedule every row of ``df``: one Karafka proxy message per row, written to
    ``schedules_topic`` through Spark's Kafka sink, for a scheduler daemon to dispatch at the
    row's ``epoch_col`` (Unix seconds).

    The target topic is ``target_topic`` (one for all rows) or ``target_topic_col``; the payload
    is ``value_col``; ``target_key_col``, ``target_partition_col`` and
    ``target_partition_key_col`` address the target message. ``key_col`` is the proxy key, the
    schedule's identity (cancel with it, re-scheduling it replaces the schedule); without it
    each row gets ``"<target_topic>-<uuid4>"``, which a retried Spark task would draw anew, so
    pass a key when a retry must not schedule twice. Proxies are partitioned by CRC32 of the
    key, as librdkafka and Karafka partition, so a cancel from any of them finds its schedule;
    with a default key, as Karafka's proxy does, by the proxy partition key: the target's
    partition, else its partition key, else its key (so the schedules of one target key share
    a partition), hashed as WaterDrop hashes a partition_key (``partition_key_hashing``, as
    :class:`ferrokafka.Client` takes it); a payload over ``max_payload_size`` bytes
    (WaterDrop's default, 1,000,012) fails the job with :class:`ferrokafka.ScheduleError`;
    ``partitions`` is the schedules topic's partition count (looked up when not given).
    ``kafka_options`` are Spark Kafka sink options (``kafka.*`` settings passed through);
    ``config`` takes librdkafka settings instead (security, as every ferrokafka component takes
    them), for the driver's client and, through :func:`kafka_options`, for the sink.

    A row with a null epoch or target, or an epoch more than 10 s in the past when the task
    runs, fails the job with :class:`ferrokafka.ScheduleError` (nothing half-valid is written).

    Example:
        >>> schedule_dataframe(
        ...     orders, "schedules", "remind_at", target_topic="reminders",
        ...     value_col="payload", key_col="order_id", bootstrap_servers="127.0.0.1:9092",
        ... )
        >>> sorted(message.key() for message in client.read_topic("schedules"))
        [b'o-1', b'o-2']
    """
    if (target_topic is None) == (target_topic_col is None):
        raise ValueError("pass exactly one of target_topic and target_topic_col")
    options = _kafka_options(bootstrap_servers, kafka_options, config)
    topic = F.lit(target_topic) if target_topic is not None else _col(target_topic_col or "")
    headers = schedule_headers(
        topic,
        epoch_col,
        key=target_key_col,
        partition=target_partition_col,
        partition_key=target_partition_key_col,
        payload_size=F.octet_length(_col(value_col).cast("binary")),
        max_payload_size=max_payload_size,
    )
    columns = [_col(value_col).cast("binary").alias("value"), headers.alias("headers")]
    # Karafka's proxy partition key for a default key (the core's schedule_proxy rule).
    by_target = [
        _col(column).cast("string")
        for column in (target_partition_col, target_partition_key_col, target_key_col)
        if column is not None
    ]
    if key_col is not None:
        columns.append(_col(key_col).cast("string").alias("key"))
    else:
        columns.append(F.concat(topic.cast("string"), F.lit("-"), F.expr("uuid()")).alias("key"))
        if by_target:
            columns.append(F.coalesce(*by_target).alias("partition_by"))
    proxies = df.select(*columns)
    count = partitions or _partition_count(options, schedules_topic, config)
    _write_proxies(proxies, schedules_topic, options, count, partition_key_hashing)


def cancel_dataframe(
    df: DataFrame,
    schedules_topic: str,
    key_col: ColumnOrName,
    *,
    bootstrap_servers: str | None = None,
    kafka_options: Mapping[str, str] | None = None,
    partitions: int | None = None,
    config: ClientConfig | None = None,
    partition_key_col: ColumnOrName | None = None,
    partition_key_hashing: PartitionKeyHashing = "waterdrop",
) -> None:
    """Cancel the schedule of every proxy key in ``key_col``: one Karafka cancel message per
    row, through Spark's Kafka sink (partitioned like :func:`schedule_dataframe`). A schedule
    sent with an envelope ``partition_key`` is on that key's partition: give the same key in
    ``partition_key_col`` (hashed as WaterDrop does, or by ``partition_key_hashing``) so its
    cancel lands there too.

    Example:
        >>> cancel_dataframe(cancelled, "schedules", "order_id",
        ...                  bootstrap_servers="127.0.0.1:9092")
        >>> [message.key() for message in client.read_topic("schedules")]
        [b'o-1']
    """
    options = _kafka_options(bootstrap_servers, kafka_options, config)
    # The cancel headers do not depend on the key: build them once, in Rust, as literals.
    template = cancel_proxy("template", {"topic": schedules_topic})
    headers = F.array(
        *[
            F.struct(F.lit(name).alias("key"), F.lit(value).cast("binary").alias("value"))
            for name, value in template.headers
        ]
    )
    columns = [
        _col(key_col).cast("string").alias("key"),
        F.lit(None).cast("binary").alias("value"),
        headers.alias("headers"),
    ]
    if partition_key_col is not None:
        columns.append(_col(partition_key_col).cast("string").alias("partition_by"))
    proxies = df.select(*columns)
    count = partitions or _partition_count(options, schedules_topic, config)
    _write_proxies(proxies, schedules_topic, options, count, partition_key_hashing)


def _read(
    reader: DataFrameReader | DataStreamReader,
    bootstrap_servers: str,
    topic: str,
    offsets: Mapping[str, str],
    options: Mapping[str, str] | None,
    config: ClientConfig | None,
) -> DataFrame:
    """``topic`` through Spark's Kafka source, batch or streaming: ``config`` as its options,
    then ``offsets`` (``startingOffsets``, ...), then the caller's raw ``options``, which win."""
    return (
        reader.format("kafka")
        .options(**kafka_options(config or {}))
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .options(**offsets)
        .options(**dict(options or {}))
        .load()
    )


def _kafka_columns() -> list[Column]:
    # Columns need an active SparkContext: built per call, never at import.
    return [
        F.col("key").cast("string").alias("key"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
    ]


def _reports(raw: DataFrame, max_inflated: int) -> DataFrame:
    report = decode_report("value", max_inflated=max_inflated).alias("report")
    return raw.select(*_kafka_columns(), report).select(
        "key",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        F.col("report.process.id").alias("process_id"),
        F.col("report.process.status").alias("status"),
        F.col("report.dispatched_at").alias("dispatched_at"),
        F.col("report.stats.lag").alias("lag"),
        *[
            F.col(f"report.{field}").alias(field)
            for field in ("schema_version", "process", "stats", "partitions", "jobs", "error")
        ],
    )


def read_reports(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    *,
    starting_offsets: str = "earliest",
    ending_offsets: str = "latest",
    max_inflated: int = DEFAULT_MAX_INFLATED,
    options: Mapping[str, str] | None = None,
    config: ClientConfig | None = None,
) -> DataFrame:
    """A batch DataFrame of the process reports on ``topic``, decoded: Kafka ``key``,
    ``kafka_partition``, ``kafka_offset``, ``kafka_timestamp``, then ``process_id``, ``status``,
    ``dispatched_at``, ``lag`` (the process's total), and every field of
    :func:`ferrokafka.arrow.decode_report` (``process``, ``stats``, ``partitions`` with the lags
    per partition: ``lag`` to the committed offset, ``lag_stored`` to the stored one; Karafka
    Web shows ``lag_stored`` where known, else ``lag``, and ``lag`` above sums that; ``jobs``,
    ``error``). Undecodable records are rows with ``error`` set.

    Example:
        >>> read_reports(spark, "127.0.0.1:9092", "karafka_consumers_reports").select(
        ...     "process_id", F.explode("partitions").alias("p")
        ... ).select("process_id", "p.partition", "p.lag", "p.lag_stored").show()
        +------------------+---------+---+----------+
        |        process_id|partition|lag|lag_stored|
        +------------------+---------+---+----------+
        |host-1:4242:ab12cd|        0|102|       100|
        |host-1:4242:ab12cd|        1| 32|        30|
        +------------------+---------+---+----------+
        <BLANKLINE>
    """
    offsets = {"startingOffsets": starting_offsets, "endingOffsets": ending_offsets}
    raw = _read(spark.read, bootstrap_servers, topic, offsets, options, config)
    return _reports(raw, max_inflated)


def read_states(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    *,
    starting_offsets: str = "earliest",
    ending_offsets: str = "latest",
    max_inflated: int = DEFAULT_MAX_INFLATED,
    options: Mapping[str, str] | None = None,
    config: ClientConfig | None = None,
) -> DataFrame:
    """A batch DataFrame of the scheduler state reports on ``topic`` (a schedules topic's
    ``<schedules>_states`` topic), decoded: ``key`` (``"<state>_state"``), ``kafka_partition``
    (the schedules partition it describes), ``kafka_offset``, ``kafka_timestamp`` and every
    field of :func:`ferrokafka.arrow.decode_state` (``state``, ``offsets``, ``daily``,
    ``dispatched``, ..., ``error``).

    Example:
        >>> read_states(spark, "127.0.0.1:9092", "schedules_states").groupBy(
        ...     "kafka_partition").agg(F.max_by("state", "dispatched_at")).show()
        +---------------+----------------------------+
        |kafka_partition|max_by(state, dispatched_at)|
        +---------------+----------------------------+
        |              0|                      loaded|
        +---------------+----------------------------+
        <BLANKLINE>
    """
    offsets = {"startingOffsets": starting_offsets, "endingOffsets": ending_offsets}
    raw = _read(spark.read, bootstrap_servers, topic, offsets, options, config)
    state = decode_state("value", max_inflated=max_inflated).alias("state_report")
    return raw.select(*_kafka_columns(), state).select(
        "key", "kafka_partition", "kafka_offset", "kafka_timestamp", "state_report.*"
    )


def lag_table(reports: DataFrame) -> DataFrame:
    """The latest lag per process, consumer group, topic and partition of a DataFrame of
    decoded reports (as :func:`read_reports` makes; batch or streaming): the values of the
    report with the newest ``dispatched_at``."""
    partitions = reports.where(F.col("error").isNull()).select(
        "process_id", "dispatched_at", F.explode("partitions").alias("p")
    )
    latest = F.max(
        F.struct(
            F.col("dispatched_at"),
            F.col("p.lag").alias("lag"),
            F.col("p.lag_stored").alias("lag_stored"),
            F.col("p.committed_offset").alias("committed_offset"),
            F.col("p.hi_offset").alias("hi_offset"),
        )
    ).alias("latest")
    keys = [
        F.col("process_id"),
        F.col("p.consumer_group").alias("consumer_group"),
        F.col("p.topic").alias("topic"),
        F.col("p.partition").alias("partition"),
    ]
    return (
        partitions.groupBy(*keys)
        .agg(latest)
        .select("process_id", "consumer_group", "topic", "partition", "latest.*")
    )


def stream_lag(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    *,
    sink: str = "memory",
    query_name: str = "ferrokafka_lag",
    starting_offsets: str = "earliest",
    max_inflated: int = DEFAULT_MAX_INFLATED,
    options: Mapping[str, str] | None = None,
    checkpoint_location: str | None = None,
    config: ClientConfig | None = None,
    available_now: bool = False,
    processing_time: str | None = None,
    shuffle_partitions: int = 1,
) -> StreamingQuery:
    """Start a structured-streaming query that keeps the latest lag per process, consumer
    group, topic and partition from the reports ``topic`` (:func:`lag_table`), in complete
    output mode, into ``sink`` (``"memory"``: the table ``query_name``; ``"console"``; any
    sink that supports complete mode). Returns the running query.

    ``available_now=True`` reads what the topic holds when the query starts, then the query
    stops: its ``processAllAvailable()`` (or ``awaitTermination()``) returns even while
    processes keep reporting. ``processing_time`` (``"10 seconds"``) starts a micro-batch at
    most that often; by default each starts as soon as the previous one ended. The lag table
    has one row per process and partition, so its aggregation uses ``shuffle_partitions``
    partitions (1), not the session's ``spark.sql.shuffle.partitions`` (200 unless set, which
    makes each micro-batch run 200 state-store tasks); a query restarted from
    ``checkpoint_location`` keeps the count it started with.

    Example:
        >>> reports = "karafka_consumers_reports"
        >>> query = stream_lag(spark, "127.0.0.1:9092", reports, available_now=True)
        >>> query.processAllAvailable()
        >>> spark.table("ferrokafka_lag").select(
        ...     "process_id", "partition", "lag", "lag_stored"
        ... ).orderBy("partition").show()
        +------------------+---------+---+----------+
        |        process_id|partition|lag|lag_stored|
        +------------------+---------+---+----------+
        |host-1:4242:ab12cd|        0|102|       100|
        |host-1:4242:ab12cd|        1| 32|        30|
        +------------------+---------+---+----------+
        <BLANKLINE>
    """
    if available_now and processing_time is not None:
        raise ValueError("pass at most one of available_now=True and processing_time")
    if shuffle_partitions < 1:
        raise ValueError(f"shuffle_partitions must be at least 1, got {shuffle_partitions}")
    offsets = {"startingOffsets": starting_offsets}
    raw = _read(spark.readStream, bootstrap_servers, topic, offsets, options, config)
    writer = (
        lag_table(_reports(raw, max_inflated))
        .writeStream.outputMode("complete")
        .format(sink)
        .queryName(query_name)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time is not None:
        writer = writer.trigger(processingTime=processing_time)
    if checkpoint_location is not None:
        writer = writer.option("checkpointLocation", checkpoint_location)
    # A query takes the session's settings when it starts (and keeps them in its checkpoint):
    # the shuffle-partition count is set for this start only, then given back.
    setting = "spark.sql.shuffle.partitions"
    previous = spark.conf.get(setting)
    spark.conf.set(setting, str(shuffle_partitions))
    try:
        return writer.start()
    finally:
        if previous is None:
            spark.conf.unset(setting)
        else:
            spark.conf.set(setting, previous)
