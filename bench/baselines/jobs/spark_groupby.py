"""A Spark job in local mode for bench/baselines/spark.sh: ROWS generated rows
(a hashed key, a value, a SHA-256 string) cached, counted, grouped by key
and aggregated. Prints the result on stdout; on stderr the job's seconds
and the JVM's peak resident set (VmHWM), read through Py4J.

usage: spark-submit bench/baselines/jobs/spark_groupby.py ROWS
"""
import sys, time
from pyspark.sql import SparkSession, functions as F
rows = int(sys.argv[1])
spark = SparkSession.builder.master("local[2]").appName("farmem-groupby") \
    .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "8").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
t0 = time.time()
df = spark.range(rows).select((F.col("id") * 2654435761 % 100003).alias("k"), (F.col("id") % 1000).alias("v"), F.sha2(F.col("id").cast("string"), 256).alias("s")).cache()
n = df.count()
g = df.groupBy("k").agg(F.sum("v").alias("sv"), F.count("*").alias("c"), F.max("s").alias("ms"))
res = g.agg(F.sum("sv"), F.sum("c"), F.sum(F.crc32("ms"))).collect()[0]
print("rows", n, "result", tuple(res))
print("seconds %.2f" % (time.time() - t0), file=sys.stderr)
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
for l in open(f"/proc/{pid}/status"):
    if l.startswith("VmHWM"):
        print("jvm", l.strip(), file=sys.stderr)
spark.stop()
