//! Floods one partition through a cqlguard that refuses its requests, with
//! ScyllaDB's Rust driver, and checks what the driver sees of each refused
//! request.
//!
//! The driver opts in to SCYLLA_RATE_LIMIT_ERROR when the proxy advertises
//! it, so a refused request fails with DbError::RateLimitReached carrying the
//! operation's type and rejected_by_coordinator set (LIMIT_EXPECT=rate_limit).
//! Were the extension not advertised it would be DbError::ConfigError with
//! ScyllaDB's message (LIMIT_EXPECT=config_error). A client class over its
//! request unit budget is refused with Config_error whether or not the
//! extension is advertised, DbError::ConfigError naming the class
//! (LIMIT_EXPECT=class_budget).
//!
//! The driver consults its retry policy on every failed attempt, so the
//! session's policy records each consultation, asks the driver's default
//! policy what it would do, and answers DontRetry whatever that is; the run
//! fails if the default would have retried a refusal. Speculative execution,
//! which would resend a request whatever the retry policy says, is off. The
//! caller also counts the requests the proxy saw.
//!
//! A request shed while its node is slow (LIMIT_EXPECT=shed) must be refused
//! every time with DbError::Overloaded and cqlguard's message for tier
//! LIMIT_TIER and node LIMIT_NODE. Here the session's policy answers what the
//! default policy decides, so the driver retries as it does out of the box:
//! the default policy retries Overloaded on the next node of the query plan
//! for idempotent statements only, and these are not idempotent, so each
//! shed request fails at once after one consultation.
//!
//! Environment: CQL_HOST, CQL_PORT, CQL_USER, CQL_PASSWORD; LIMIT_KEYSPACE
//! and LIMIT_TABLE, a table (k int, c int, PRIMARY KEY (k, c)) limited for
//! reads and writes; LIMIT_KEY, the partition to flood; LIMIT_N, requests
//! per operation (50); LIMIT_EXPECT, rate_limit (the default), config_error,
//! class_budget or shed; LIMIT_CLASS, the client class a class_budget
//! refusal names; LIMIT_TIER and LIMIT_NODE, the tier and node a shed
//! refusal names.
//!
//! Prints the first refusal of each operation, then one JSON line:
//! {"write": {"accepted": n, "refused": n}, "read": {...}, "retry_consulted":
//! n, "retry_decisions": n, "seconds": s}, where retry_decisions counts the
//! retries the default policy made or would have made; in shed mode also
//! "surfaced", what each refusal failed with. Exits 1 on anything
//! unexpected.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scylla::client::execution_profile::ExecutionProfile;
use scylla::errors::{DbError, ExecutionError, OperationType, RequestAttemptError};
use scylla::policies::retry::{
    DefaultRetryPolicy, RequestInfo, RetryDecision, RetryPolicy, RetrySession,
};
use scylla::statement::Consistency;

use cqlguard_rust_driver_test::{env_or, env_parse, Settings};

/// What the retry policy was asked: the error, and the default policy's
/// decision for it.
type Consultations = Arc<Mutex<Vec<(String, RetryDecision)>>>;

/// A retry policy that records each time the driver consults it with what
/// the default policy decided. It never retries, unless obey is set: then it
/// answers what the default decided.
#[derive(Debug, Default)]
struct RecordingRetryPolicy {
    consulted: Consultations,
    obey: bool,
}

impl RetryPolicy for RecordingRetryPolicy {
    fn new_session(&self) -> Box<dyn RetrySession> {
        Box::new(RecordingRetrySession {
            consulted: self.consulted.clone(),
            obey: self.obey,
            default: DefaultRetryPolicy::new().new_session(),
        })
    }
}

struct RecordingRetrySession {
    consulted: Consultations,
    obey: bool,
    default: Box<dyn RetrySession>,
}

impl RetrySession for RecordingRetrySession {
    fn decide_should_retry(&mut self, info: RequestInfo) -> RetryDecision {
        let error = format!("{:?}", info.error);
        let default = self.default.decide_should_retry(info);
        self.consulted
            .lock()
            .unwrap()
            .push((error, default.clone()));
        if self.obey {
            default
        } else {
            RetryDecision::DontRetry
        }
    }

    fn reset(&mut self) {
        self.default.reset();
    }
}

fn fail(msg: String) -> ! {
    println!("FAIL {msg}");
    std::process::exit(1)
}

#[derive(Clone, Copy, PartialEq)]
enum Expect {
    RateLimit,
    ConfigError,
    ClassBudget,
    Shed,
}

/// Fails unless e is the refusal this driver should see for op, and returns
/// what it is.
fn check_refusal(e: &ExecutionError, op: &str, expect: Expect, message: &str) -> String {
    let ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, msg)) = e else {
        fail(format!("{op}: {e} ({e:?}); want a server error"));
    };
    match (expect, db) {
        // The driver makes Overloaded of error code 0x1001 and of nothing
        // else.
        (Expect::Shed, DbError::Overloaded) => {}
        (
            Expect::RateLimit,
            DbError::RateLimitReached {
                op_type,
                rejected_by_coordinator,
            },
        ) => {
            let want = if op == "write" {
                OperationType::Write
            } else {
                OperationType::Read
            };
            if *op_type != want || !rejected_by_coordinator {
                fail(format!(
                    "{op}: RateLimitReached op_type={op_type:?} rejected_by_coordinator={rejected_by_coordinator}"
                ));
            }
        }
        (Expect::ConfigError | Expect::ClassBudget, DbError::ConfigError) => {}
        _ => fail(format!(
            "{op}: {db:?}: {msg}; want {}",
            match expect {
                Expect::RateLimit => "RateLimitReached",
                Expect::Shed => "Overloaded",
                Expect::ConfigError | Expect::ClassBudget => "ConfigError",
            }
        )),
    }
    if !msg.contains(message) {
        fail(format!("{op}: message {msg:?}; want {message:?}"));
    }
    format!("LastAttemptError(DbError({db:?}))")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let settings = Settings::from_env();
    let ks = env_or("LIMIT_KEYSPACE", "cqlguard_limits");
    let table = env_or("LIMIT_TABLE", "hot");
    let key: i32 = env_parse("LIMIT_KEY", 40);
    let n: u32 = env_parse("LIMIT_N", 50);
    let class = env_or("LIMIT_CLASS", "default");
    let expect = match env_or("LIMIT_EXPECT", "rate_limit").as_str() {
        "rate_limit" => Expect::RateLimit,
        "config_error" => Expect::ConfigError,
        "class_budget" => Expect::ClassBudget,
        "shed" => Expect::Shed,
        other => {
            eprintln!("LIMIT_EXPECT={other}: want rate_limit, config_error, class_budget or shed");
            std::process::exit(2)
        }
    };

    let retry = Arc::new(RecordingRetryPolicy {
        obey: expect == Expect::Shed,
        ..Default::default()
    });
    let consulted = retry.consulted.clone();
    let profile = ExecutionProfile::builder()
        .consistency(Consistency::One)
        .request_timeout(Some(Duration::from_secs(20)))
        .retry_policy(retry)
        .speculative_execution_policy(None)
        .build();
    let session = settings
        .builder()
        .default_execution_profile_handle(profile.into_handle())
        .keyspaces_to_fetch([ks.as_str()])
        .build()
        .await
        .unwrap_or_else(|e| fail(format!("connect: {e}")));

    let insert = session
        .prepare(format!("INSERT INTO {ks}.{table} (k, c) VALUES (?, ?)"))
        .await
        .unwrap_or_else(|e| fail(format!("prepare: {e}")));
    // The key inline, so a read is one QUERY: with bound values this
    // driver would prepare the statement first.
    let select = format!("SELECT c FROM {ks}.{table} WHERE k = {key} LIMIT 1");

    let mut json = Vec::new();
    let mut refused_total = 0;
    let mut surfaced = std::collections::BTreeSet::new();
    let start = Instant::now();
    for op in ["write", "read"] {
        let message = match expect {
            Expect::ClassBudget => format!("client class {class} is over its budget"),
            Expect::Shed => format!(
                "cqlguard: request shed, tier {}, while the node {} is slow (shedding); retry later",
                env_or("LIMIT_TIER", "1"),
                env_or("LIMIT_NODE", "127.0.0.2:9042")
            ),
            Expect::RateLimit | Expect::ConfigError => format!(
                "Per-partition rate limit reached for {op} in table {ks}.{table}, rejected by coordinator"
            ),
        };
        let (mut accepted, mut refused) = (0, 0);
        for i in 0..n {
            let r = if op == "write" {
                session.execute_unpaged(&insert, (key, i as i32)).await
            } else {
                session.query_unpaged(select.as_str(), ()).await
            };
            match r {
                Ok(_) => accepted += 1,
                Err(e) => {
                    surfaced.insert(check_refusal(&e, op, expect, &message));
                    if refused == 0 {
                        println!("refused {op}: {e:?}");
                    }
                    refused += 1;
                }
            }
        }
        if refused == 0 {
            fail(format!("no {op} was refused ({accepted} accepted)"));
        }
        if expect == Expect::Shed && accepted != 0 {
            fail(format!("{accepted} {op}s were not shed"));
        }
        refused_total += refused;
        json.push(format!(
            "\"{op}\": {{\"accepted\": {accepted}, \"refused\": {refused}}}"
        ));
    }
    let seconds = start.elapsed().as_secs_f64();
    drop(session);

    let consulted = consulted.lock().unwrap().clone();
    let would_retry: Vec<&(String, RetryDecision)> = consulted
        .iter()
        .filter(|(_, d)| *d != RetryDecision::DontRetry)
        .collect();
    if expect == Expect::Shed {
        json.push(format!(
            "\"surfaced\": \"{}\"",
            surfaced.iter().cloned().collect::<Vec<_>>().join(" | ")
        ));
    }
    println!(
        "{{{}, \"retry_consulted\": {}, \"retry_decisions\": {}, \"seconds\": {seconds:.3}}}",
        json.join(", "),
        consulted.len(),
        would_retry.len()
    );
    // A retry the default decided was made when the policy obeyed it, and
    // is one more consultation.
    let retried = if expect == Expect::Shed {
        if surfaced.len() != 1 {
            fail(format!("refusals surfaced as {surfaced:?}; want one kind"));
        }
        would_retry.len()
    } else {
        if !would_retry.is_empty() {
            fail(format!(
                "the default retry policy would have retried: {would_retry:?}"
            ));
        }
        0
    };
    if consulted.len() != refused_total + retried {
        fail(format!(
            "the retry policy was consulted {} times for {refused_total} refusals: {consulted:?}",
            consulted.len()
        ));
    }
}
