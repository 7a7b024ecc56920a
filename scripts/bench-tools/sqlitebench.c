/*
 * sqlitebench DB update N | sqlitebench DB create PREFIX N: the sqlite3
 * reference for durable writes, as a careful application would make them:
 * WAL, synchronous=FULL (an fsync of the WAL at every commit, as keychainfs
 * does), one transaction per operation, a prepared statement, a 32-byte blob
 * under a text key.  update upserts one key N times; create inserts N new
 * keys.  Prints "<ns per operation> ns/op <bytes written per operation> B/op",
 * the bytes from /proc/self/io.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Each operation writes a different value: SQLite skips writing a row that
 * does not change, which would leave nothing to make durable. */
static char secret[] = "0123456789abcdef0123456789abcdef";

static void vary(long i)
{
	char head[17];
	snprintf(head, sizeof head, "%016lx", i);
	memcpy(secret, head, 16);
}

static void check(int rc, sqlite3 *db, const char *what)
{
	if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
		fprintf(stderr, "sqlitebench: %s: %s\n", what, sqlite3_errmsg(db));
		exit(1);
	}
}

static long long written(void)
{
	char line[256];
	long long v = -1;
	FILE *f = fopen("/proc/self/io", "r");
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "write_bytes: %lld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char *argv[])
{
	int create = argc == 5 && strcmp(argv[2], "create") == 0;
	if (!create && !(argc == 4 && strcmp(argv[2], "update") == 0)) {
		fprintf(stderr, "usage: sqlitebench DB update N | sqlitebench DB create PREFIX N\n");
		return 2;
	}
	long n = atol(argv[argc - 1]);
	sqlite3 *db;
	sqlite3_stmt *st;
	check(sqlite3_open(argv[1], &db), db, "open");
	check(sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
			   "CREATE TABLE IF NOT EXISTS items (name TEXT PRIMARY KEY, secret BLOB NOT NULL)",
			   NULL, NULL, NULL), db, "schema");
	check(sqlite3_prepare_v2(db, "INSERT INTO items (name, secret) VALUES (?, ?) "
				 "ON CONFLICT (name) DO UPDATE SET secret = excluded.secret", -1, &st, NULL),
	      db, "prepare");
	char name[256];
	long long before = written();
	double start = now_ns();
	for (long i = 0; i < n; i++) {
		vary(i);
		if (create)
			snprintf(name, sizeof name, "%s%ld", argv[3], i);
		else
			strcpy(name, "update");
		sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_blob(st, 2, secret, sizeof secret - 1, SQLITE_STATIC);
		check(sqlite3_step(st), db, "step");
		sqlite3_reset(st);
	}
	double per = (now_ns() - start) / n;
	printf("%.0f ns/op %.0f B/op\n", per, (double)(written() - before) / n);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return 0;
}
