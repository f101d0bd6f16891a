cd /tmp
rm -f /tmp/nobody-sq.db
/work/main/target/release/farmem run --local 24M --stats -- sqlite3 :memory: "
PRAGMA cache_size=-400000;
CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<200000)
INSERT INTO t SELECT i, randomblob(600) FROM c;
CREATE INDEX tv ON t(v);
SELECT count(*), sum(length(v)), (SELECT count(*) FROM t a JOIN t b ON a.id=b.id AND a.v=b.v) FROM t;
SELECT count(*) FROM (SELECT v FROM t ORDER BY v);
" 2>&1 | grep -E "^[0-9]|fetched from|written back|resident / budget|error|Error"
