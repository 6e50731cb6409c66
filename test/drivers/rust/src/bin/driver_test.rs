//! Exercises a CQL endpoint with ScyllaDB's Rust driver (crate `scylla`), as
//! a user would, and checks what a transparent proxy must preserve: the
//! driver sees only the expected hosts (the proxy) and talks to no other,
//! and results, paging, keyspace switching and errors come through
//! unchanged.
//!
//! Environment: CQL_HOST (127.0.0.1), CQL_PORT (9042), CQL_USER /
//! CQL_PASSWORD (cassandra / cassandra), CQL_KEYSPACE (cqlguard_rust; dropped
//! and recreated), EXPECT_HOSTS (comma-separated, default CQL_HOST),
//! CQL_PROTOCOL (optional; this driver speaks only protocol v4, so anything
//! else fails), CQL_COMPRESSION (none, lz4 or snappy; none),
//! CQL_TEST_TIMEOUT (seconds, 300).
//!
//! Prints one line per step, the failing step's error, and a closing
//! "rust-driver: N passed, N failed" line; exits 1 on the first failure.

use std::collections::BTreeSet;
use std::error::Error;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use scylla::client::session::Session;
use scylla::client::Compression;
use scylla::errors::{DbError, ExecutionError, PrepareError, RequestAttemptError};
use scylla::response::query_result::QueryResult;
use scylla::response::{PagingState, PagingStateResponse};
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::Statement;

use cqlguard_rust_driver_test::{env_or, env_parse, Settings};

type Res = Result<(), Box<dyn Error>>;

const ROWS: i32 = 6000;
const FETCH: i32 = 500;

/// Returns an error from the enclosing step unless cond holds.
macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+).into());
        }
    };
}

/// Counts steps and ends the process on the first failure.
struct Steps {
    passed: u32,
}

impl Steps {
    async fn run(&mut self, name: &str, body: impl Future<Output = Res>) {
        let t0 = Instant::now();
        if let Err(e) = body.await {
            println!("FAIL {name}: {e}");
            println!("     {e:?}");
            finish(self.passed, 1);
        }
        self.passed += 1;
        println!("ok   {name} ({:.2}s)", t0.elapsed().as_secs_f64());
    }
}

fn finish(passed: u32, failed: u32) -> ! {
    println!("rust-driver: {passed} passed, {failed} failed");
    std::process::exit(if failed > 0 { 1 } else { 0 })
}

/// Records the address of every connection a response came back on, so the
/// last step can check that no request went anywhere but EXPECT_HOSTS.
#[derive(Default)]
struct Coordinators(Mutex<BTreeSet<SocketAddr>>);

impl Coordinators {
    fn note(&self, r: QueryResult) -> QueryResult {
        self.0
            .lock()
            .unwrap()
            .insert(r.request_coordinator().connection_address());
        r
    }
}

/// Returns the server error an execution failed with, if it failed with one.
fn db_error(e: &ExecutionError) -> Option<(&DbError, &str)> {
    match e {
        ExecutionError::LastAttemptError(a) => attempt_db_error(a),
        ExecutionError::PrepareError(p) => prepare_db_error(p),
        _ => None,
    }
}

fn prepare_db_error(e: &PrepareError) -> Option<(&DbError, &str)> {
    match e {
        PrepareError::AllAttemptsFailed { first_attempt } => attempt_db_error(first_attempt),
        _ => None,
    }
}

fn attempt_db_error(e: &RequestAttemptError) -> Option<(&DbError, &str)> {
    match e {
        RequestAttemptError::DbError(d, msg) => Some((d, msg.as_str())),
        _ => None,
    }
}

/// Checks that a request failed with the server error want whose message
/// contains text; server finds the server error in the driver's error.
fn expect_error<T, E: std::fmt::Display>(
    what: &str,
    got: Result<T, E>,
    server: impl Fn(&E) -> Option<(&DbError, &str)>,
    want: DbError,
    text: &str,
) -> Res {
    let e = match got {
        Ok(_) => return Err(format!("no error for {what}").into()),
        Err(e) => e,
    };
    let Some((code, msg)) = server(&e) else {
        return Err(format!("{what}: got {e}, want a server error").into());
    };
    check!(*code == want, "{what}: got {code:?} ({msg}), want {want:?}");
    check!(
        msg.contains(text),
        "{what}: message {msg:?} does not mention {text:?}"
    );
    Ok(())
}

/// Returns the sorted IP addresses of the nodes the driver knows.
fn node_ips(session: &Session) -> Vec<String> {
    let mut ips: Vec<String> = session
        .get_cluster_state()
        .get_nodes_info()
        .iter()
        .map(|n| n.address.ip().to_string())
        .collect();
    ips.sort();
    ips
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let timeout = env_parse("CQL_TEST_TIMEOUT", 300u64);
    let mut steps = Steps { passed: 0 };
    if tokio::time::timeout(Duration::from_secs(timeout), run(&mut steps))
        .await
        .is_err()
    {
        println!("FAIL the whole run took more than {timeout}s (CQL_TEST_TIMEOUT)");
        finish(steps.passed, 1);
    }
    finish(steps.passed, 0);
}

async fn run(steps: &mut Steps) {
    let started = Instant::now();
    let settings = Settings::from_env();
    let ks = env_or("CQL_KEYSPACE", "cqlguard_rust");
    let mut expect: Vec<String> = env_or("EXPECT_HOSTS", &settings.host)
        .split(',')
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .collect();
    expect.sort();
    let protocol = env_or("CQL_PROTOCOL", "");
    let compression = match env_or("CQL_COMPRESSION", "none").as_str() {
        "none" => None,
        "lz4" => Some(Compression::Lz4),
        "snappy" => Some(Compression::Snappy),
        other => {
            eprintln!("CQL_COMPRESSION={other}: want none, lz4 or snappy");
            std::process::exit(2)
        }
    };
    let seen = Coordinators::default();
    let mut session: Option<Session> = None;

    steps
        .run(
            "1. connect; the driver's view of the cluster is exactly EXPECT_HOSTS",
            async {
                check!(
                    protocol.is_empty() || protocol == "4",
                    "CQL_PROTOCOL={protocol}: this driver speaks only protocol v4"
                );
                // Schema metadata of this keyspace only: the driver cannot parse
                // a quoted UDT name in a column type (frozen<"MixedType">), as
                // other tests leave in the shared Cassandra, and a schema it cannot
                // parse fails every metadata refresh.
                let s = settings
                    .builder()
                    .compression(compression)
                    .keyspaces_to_fetch([ks.as_str()])
                    .build()
                    .await?;
                check!(
                    node_ips(&s) == expect,
                    "nodes {:?}, want {expect:?}",
                    node_ips(&s)
                );
                let state = s.get_cluster_state();
                for n in state.get_nodes_info() {
                    println!(
                        "     node {} dc={:?} rack={:?} connected={}",
                        n.address,
                        n.datacenter,
                        n.rack,
                        n.is_connected()
                    );
                }
                println!(
                    "     protocol v4, compression {compression:?}, cluster {:?}",
                    state.cluster_name()
                );
                session = Some(s);
                Ok(())
            },
        )
        .await;
    let s = session.as_ref().unwrap();

    steps
        .run("2. create keyspace (SimpleStrategy rf 1) and table (composite partition key, clustering column)", async {
            s.query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), ()).await?;
            s.query_unpaged(
                format!("CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"),
                (),
            )
            .await?;
            s.query_unpaged(format!("CREATE TABLE {ks}.t (a int, b text, c int, v text, PRIMARY KEY ((a, b), c))"), ())
                .await?;
            s.refresh_metadata().await?;
            let state = s.get_cluster_state();
            let table = state
                .get_keyspace(&ks)
                .and_then(|k| k.tables.get("t"))
                .ok_or_else(|| format!("no table {ks}.t in the driver's metadata"))?;
            check!(table.partition_key == ["a", "b"], "partition key {:?}", table.partition_key);
            check!(table.clustering_key == ["c"], "clustering key {:?}", table.clustering_key);
            Ok(())
        })
        .await;

    steps
        .run(
            "3. insert and select: inline literals and prepared statements",
            async {
                seen.note(
                    s.query_unpaged(
                        format!("INSERT INTO {ks}.t (a, b, c, v) VALUES (1, 'x', 1, 'inline')"),
                        (),
                    )
                    .await?,
                );
                let rs = seen
                    .note(
                        s.query_unpaged(
                            format!(
                                "SELECT a, b, c, v FROM {ks}.t WHERE a = 1 AND b = 'x' AND c = 1"
                            ),
                            (),
                        )
                        .await?,
                    )
                    .into_rows_result()?;
                let rows: Vec<(i32, String, i32, Option<String>)> =
                    rs.rows()?.collect::<Result<_, _>>()?;
                check!(
                    rows == [(1, "x".into(), 1, Some("inline".into()))],
                    "inline select: {rows:?}"
                );

                let ins = s
                    .prepare(format!(
                        "INSERT INTO {ks}.t (a, b, c, v) VALUES (?, ?, ?, ?)"
                    ))
                    .await?;
                seen.note(
                    s.execute_unpaged(&ins, (1, "x", 2, Some("prepared")))
                        .await?,
                );
                seen.note(s.execute_unpaged(&ins, (1, "x", 3, None::<&str>)).await?);
                let sel = s
                    .prepare(format!("SELECT c, v FROM {ks}.t WHERE a = ? AND b = ?"))
                    .await?;
                let rs = seen
                    .note(s.execute_unpaged(&sel, (1, "x")).await?)
                    .into_rows_result()?;
                let rows: Vec<(i32, Option<String>)> = rs.rows()?.collect::<Result<_, _>>()?;
                let want = [
                    (1, Some("inline".to_string())),
                    (2, Some("prepared".into())),
                    (3, None),
                ];
                check!(rows == want, "prepared select: {rows:?}, want {want:?}");

                // Bound values on an unprepared statement: this driver prepares
                // it first, then executes.
                let rs = seen
                    .note(
                        s.query_unpaged(
                            format!("SELECT v FROM {ks}.t WHERE a = ? AND b = ? AND c = ?"),
                            (1, "x", 2),
                        )
                        .await?,
                    )
                    .into_rows_result()?;
                let (v,): (String,) = rs.single_row()?;
                check!(v == "prepared", "query with values: {v:?}");
                Ok(())
            },
        )
        .await;

    steps
        .run("4. batches, unlogged and logged, read back", async {
            let ins = s
                .prepare(format!(
                    "INSERT INTO {ks}.t (a, b, c, v) VALUES (?, ?, ?, ?)"
                ))
                .await?;
            for (a, kind) in [(2, BatchType::Unlogged), (3, BatchType::Logged)] {
                let mut batch = Batch::new(kind);
                let mut values = Vec::new();
                for c in 0..5 {
                    batch.append_statement(ins.clone());
                    values.push((a, "batch", c, format!("b{c}")));
                }
                seen.note(s.batch(&batch, &values).await?);
                // and an all-literal batch, not prepared
                let mut literal = Batch::new(kind);
                literal.append_statement(Statement::new(format!(
                    "INSERT INTO {ks}.t (a, b, c, v) VALUES ({a}, 'batch', 5, 'inline')"
                )));
                seen.note(s.batch(&literal, ((),)).await?);
                let rs = seen
                    .note(
                        s.query_unpaged(
                            format!("SELECT c, v FROM {ks}.t WHERE a = {a} AND b = 'batch'"),
                            (),
                        )
                        .await?,
                    )
                    .into_rows_result()?;
                let rows: Vec<(i32, String)> = rs.rows()?.collect::<Result<_, _>>()?;
                let mut want: Vec<(i32, String)> = (0..5).map(|c| (c, format!("b{c}"))).collect();
                want.push((5, "inline".into()));
                check!(rows == want, "batch {kind:?}: {rows:?}");
            }
            Ok(())
        })
        .await;

    steps
        .run(
            &format!("5. paging: {ROWS} rows in one partition, fetch size {FETCH}"),
            async {
                let ins = s
                    .prepare(format!(
                        "INSERT INTO {ks}.t (a, b, c, v) VALUES (9, 'paged', ?, ?)"
                    ))
                    .await?;
                let inserted: Vec<QueryResult> = futures::stream::iter(0..ROWS)
                    .map(|c| s.execute_unpaged(&ins, (c, format!("v{c}"))))
                    .buffer_unordered(64)
                    .try_collect()
                    .await?;
                for r in inserted {
                    seen.note(r);
                }
                let text = format!("SELECT c, v FROM {ks}.t WHERE a = 9 AND b = 'paged'");
                let want: Vec<(i32, String)> = (0..ROWS).map(|c| (c, format!("v{c}"))).collect();

                // page by page with the paging state, as a web app does
                let mut unprepared = Statement::new(text.clone());
                unprepared.set_page_size(FETCH);
                let mut prepared = s.prepare(text.clone()).await?;
                prepared.set_page_size(FETCH);
                for prepare in [false, true] {
                    let mut got: Vec<(i32, String)> = Vec::new();
                    let mut state = PagingState::start();
                    let mut pages = 0;
                    loop {
                        let (rs, next) = if prepare {
                            s.execute_single_page(&prepared, (), state).await?
                        } else {
                            s.query_single_page(unprepared.clone(), (), state).await?
                        };
                        let rs = seen.note(rs).into_rows_result()?;
                        check!(
                            rs.rows_num() <= FETCH as usize,
                            "a page of {} rows",
                            rs.rows_num()
                        );
                        for row in rs.rows::<(i32, String)>()? {
                            got.push(row?);
                        }
                        pages += 1;
                        match next {
                            PagingStateResponse::HasMorePages { state: st } => state = st,
                            PagingStateResponse::NoMorePages => break,
                        }
                    }
                    check!(
                        got.len() == ROWS as usize,
                        "prepare={prepare}: {} rows over {pages} pages",
                        got.len()
                    );
                    check!(got == want, "prepare={prepare}: rows out of order or wrong");
                    check!(pages >= ROWS / FETCH, "prepare={prepare}: {pages} pages");
                }

                // automatic paging (the driver fetches the next pages itself)
                let mut stream = s
                    .execute_iter(prepared.clone(), ())
                    .await?
                    .rows_stream::<(i32, String)>()?;
                let mut n = 0;
                while let Some(row) = stream.next().await {
                    let (c, _) = row?;
                    check!(c == n, "streamed row {n}: c={c}");
                    n += 1;
                }
                check!(n == ROWS, "streamed {n} rows");
                for c in stream.request_coordinators() {
                    seen.0.lock().unwrap().insert(c.connection_address());
                }

                let rs = seen
                    .note(
                        s.query_unpaged(
                            format!("SELECT count(*) AS n FROM {ks}.t WHERE a = 9 AND b = 'paged'"),
                            (),
                        )
                        .await?,
                    )
                    .into_rows_result()?;
                let (count,): (i64,) = rs.single_row()?;
                check!(count == ROWS as i64, "count(*) = {count}");
                Ok(())
            },
        )
        .await;

    steps
        .run(
            "6. USE keyspace, then unqualified queries (simple and prepared)",
            async {
                seen.note(s.query_unpaged(format!("USE {ks}"), ()).await?);
                check!(
                    s.get_keyspace().as_deref().map(String::as_str) == Some(ks.as_str()),
                    "session keyspace {:?}",
                    s.get_keyspace()
                );
                let rs = seen
                    .note(
                        s.query_unpaged("SELECT v FROM t WHERE a = 1 AND b = 'x' AND c = 1", ())
                            .await?,
                    )
                    .into_rows_result()?;
                let (v,): (String,) = rs.single_row()?;
                check!(v == "inline", "unqualified select: {v:?}");
                let sel = s
                    .prepare("SELECT v FROM t WHERE a = ? AND b = ? AND c = ?")
                    .await?;
                let rs = seen
                    .note(s.execute_unpaged(&sel, (1, "x", 2)).await?)
                    .into_rows_result()?;
                let (v,): (String,) = rs.single_row()?;
                check!(v == "prepared", "unqualified prepared select: {v:?}");
                Ok(())
            },
        )
        .await;

    steps
        .run("7. errors reach the driver unchanged", async {
            let missing = format!("SELECT * FROM {ks}.missing_table");
            let r = s.query_unpaged(missing.as_str(), ()).await;
            expect_error(
                "SELECT from a missing table",
                r,
                db_error,
                DbError::Invalid,
                "missing_table",
            )?;
            let missing = format!("SELECT * FROM {ks}.missing_table WHERE a = ?");
            let r = s.prepare(missing.as_str()).await;
            expect_error(
                "PREPARE against a missing table",
                r,
                prepare_db_error,
                DbError::Invalid,
                "missing_table",
            )?;
            let r = s.query_unpaged(missing.as_str(), (1,)).await;
            expect_error(
                "a query with values against a missing table",
                r,
                db_error,
                DbError::Invalid,
                "missing_table",
            )?;
            let r = s.query_unpaged("SELEC nonsense", ()).await;
            expect_error("a syntax error", r, db_error, DbError::SyntaxError, "SELEC")?;
            // the session still works after errors
            let rs = seen
                .note(
                    s.query_unpaged("SELECT v FROM t WHERE a = 1 AND b = 'x' AND c = 1", ())
                        .await?,
                )
                .into_rows_result()?;
            let (v,): (String,) = rs.single_row()?;
            check!(v == "inline", "select after errors: {v:?}");
            Ok(())
        })
        .await;

    steps
        .run("8. drop keyspace", async {
            seen.note(s.query_unpaged(format!("DROP KEYSPACE {ks}"), ()).await?);
            Ok(())
        })
        .await;

    steps
        .run("9. after all steps the driver knows and is connected to only EXPECT_HOSTS, and every response came from them", async {
            check!(node_ips(s) == expect, "nodes {:?}, want {expect:?}", node_ips(s));
            for n in s.get_cluster_state().get_nodes_info() {
                check!(n.is_connected(), "no open connection to node {}", n.address);
            }
            let coords = seen.0.lock().unwrap().clone();
            let mut ips: Vec<String> = coords.iter().map(|a| a.ip().to_string()).collect();
            ips.dedup();
            check!(ips == expect, "responses came from {coords:?}, want only {expect:?}");
            println!("     responses came from {coords:?}");
            Ok(())
        })
        .await;

    drop(session);
    println!("     total {:.2}s", started.elapsed().as_secs_f64());
}
