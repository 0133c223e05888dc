"""The one Spark session factory.

The master comes from configuration (default ``local[2]``). Logs are quiet, the UI is
off unless asked for, and shuffles are small, because micro-batches here are small and
Spark's default of 200 shuffle partitions would dominate every trigger.

With ``log_file`` the JVM's own log (Spark's warnings and errors, with their Java stack
traces) goes to that file only, never to the terminal: a failing query is reported by
the engine in one line that names the log. A log file that cannot
be written (a full disk) loses those lines quietly; the engine's report still comes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from moirae.runtime.errors import JavaMissing
from moirae.runtime.hadoop_fs import local_fs_config
from moirae.runtime.python_launcher import python_for_workers
from moirae.runtime.worker_daemon import daemon_config


def java_major_version() -> int:
    """The major version of the ``java`` on PATH (or under JAVA_HOME), or raise JavaMissing."""
    java = shutil.which("java")
    if os.environ.get("JAVA_HOME"):
        candidate = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
        if os.path.exists(candidate):
            java = candidate
    if not java:
        raise JavaMissing("Java 17+ is required by Spark but no `java` is on PATH; install a JDK 17")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    text = out.stderr or out.stdout
    for token in text.replace('"', " ").split():
        head = token.split(".")[0]
        if head.isdigit() and "." in token:
            major = int(head)
            return 8 if major == 1 else major
    raise JavaMissing(f"could not read the Java version from {text.strip()!r}")


LOG4J2 = """status = off
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = true
appender.file.ignoreExceptions = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def _log4j_options(log_file) -> str:
    """JVM options sending Spark's log to ``log_file`` only; empty if the configuration
    cannot be written, or its path has a space (the options are split on spaces): the
    JVM then logs to the terminal as by default."""
    path = Path(log_file).resolve()
    conf = path.with_name("log4j2-spark.properties")
    if " " in str(conf):
        return ""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(LOG4J2.format(path=str(path).replace("\\", "/")))
    except OSError:
        return ""
    return f" -Dlog4j2.configurationFile=file:{conf}"


#: The driver JVM's heap, fixed at start: ``-Xms`` equals ``-Xmx``. With only a maximum,
#: G1 grows the committed heap towards it in steps minutes into a steady load, so the
#: engine's resident memory kept changing long after start for no reason but sizing,
#: and a growth that mattered could not be told from one that did not. A fixed heap is
#: the usual setting for a long-running JVM service: what the engine holds is known when
#: it starts (bench/engine_jvm.py --soak samples the heap beside RSS).
DRIVER_MEMORY = "2g"


#: How streaming queries write their checkpoint files (offsets, commits, state deltas):
#: through Hadoop's FileSystem API, not its default FileContext API. Both write a
#: temporary file and rename it into place (an atomic rename on a local or HDFS
#: directory, where Moirae keeps its checkpoints). Without Hadoop's native library
#: (pyspark does not ship it) FileContext's rename asks for the link status of both
#: paths, twice, and Hadoop's local file system answers each by running `readlink` in a
#: new process: four processes forked from the driver JVM per checkpoint file, which
#: made checkpoint writes a large part of each batch (BENCHMARKS.md has the figures).
#: The class moved package in Spark 4.1: the first that loads is used.
CHECKPOINT_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
CHECKPOINT_MANAGERS = ("org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
                       "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager")


def _filesystem_checkpoints(session) -> str | None:
    """Set the FileSystem-based checkpoint file manager on ``session`` (unless one was
    chosen already); returns the class in use, or None if none of ours loads."""
    chosen = session.conf.get(CHECKPOINT_MANAGER_KEY, None)
    if chosen and chosen not in CHECKPOINT_MANAGERS:
        return chosen  # the user's choice
    for name in CHECKPOINT_MANAGERS:
        try:
            session._jvm.java.lang.Class.forName(name)
        except Exception:  # Py4JJavaError: ClassNotFoundException in this Spark version
            continue
        session.conf.set(CHECKPOINT_MANAGER_KEY, name)
        return name
    return None


#: environment variable: more options for a new session's driver JVM, appended to Moirae's
#: own (e.g. ``-XX:TieredStopAtLevel=1``, which a short-lived driver starts on with about
#: 40 % less CPU, or a garbage collector's settings)
JVM_OPTIONS_ENV = "MOIRAE_JVM_OPTIONS"


def _extra_jvm_options() -> str:
    extra = os.environ.get(JVM_OPTIONS_ENV, "").strip()
    return f" {extra}" if extra else ""


def spark_session(master: str = "local[2]", app_name: str = "moirae", ui: bool = False,
                  shuffle_partitions: int = 2, extra: dict[str, str] | None = None, log_file=None):
    """Return (creating if needed) the process's SparkSession, configured for Moirae.
    ``log_file``: where the JVM logs (instead of the terminal); only a new session's."""
    # Python workers (UDFs, Python data sources) must run this interpreter, with its
    # packages, not whatever `python3` is first on PATH; on a local master, through a
    # launcher that leaves pyspark's zips off their path (moirae.runtime.python_launcher)
    if "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = python_for_workers(master)
    major = java_major_version()
    if major < 17:
        raise JavaMissing(f"Spark 4 needs Java 17+, found Java {major}")
    from pyspark.sql import SparkSession

    heap = (extra or {}).get("spark.driver.memory", DRIVER_MEMORY)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Rows go to Python workers (the executors' archive COPY) in Arrow batches of at
        # most maxRecordsPerBatch rows (10,000). Spark 4.3 also caps a batch at 64 MB, and
        # to do so sizes the whole batch after every row it adds, which made the archive
        # query's micro-batches several times slower. Int.MaxValue is Spark's "no byte
        # cap"; the row cap still bounds a batch.
        .config("spark.sql.execution.arrow.maxBytesPerBatch", str(2**31 - 1))
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.memory", DRIVER_MEMORY)
        .config("spark.ui.showConsoleProgress", "false")
        # Spark matches a failed foreachBatch's (long) Python traceback against a regex
        # when a streaming query stops mid-batch; with the default 512 KB thread stack
        # java.util.regex recurses into a StackOverflowError. A larger stack lets it finish.
        .config("spark.driver.extraJavaOptions", f"-Xss16m -Xms{heap}" + (_log4j_options(log_file) if log_file else "")
                + _extra_jvm_options())
    )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    for key, value in local_fs_config(master, extra or {}).items():  # no chmod process per file (moirae.runtime.hadoop_fs)
        builder = builder.config(key, value)
    for key, value in daemon_config(master, extra or {}).items():  # cached bytecode, cheap collections (moirae.runtime.worker_daemon)
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    _filesystem_checkpoints(session)
    return session
