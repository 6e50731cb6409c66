//! Settings shared by the test clients: where to connect and as whom, read
//! from the environment as the other drivers' clients read them.

use std::env;
use std::time::Duration;

use scylla::client::session_builder::SessionBuilder;

/// Returns the environment variable `name`, or `default` when it is unset
/// or empty.
pub fn env_or(name: &str, default: &str) -> String {
    match env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => default.to_string(),
    }
}

/// Returns the environment variable `name` parsed, or `default` when it is
/// unset or empty; a value that does not parse is a usage error.
pub fn env_parse<T: std::str::FromStr>(name: &str, default: T) -> T {
    match env::var(name) {
        Ok(v) if !v.is_empty() => v.parse().unwrap_or_else(|_| {
            eprintln!("{name}={v}: not a valid value");
            std::process::exit(2)
        }),
        _ => default,
    }
}

/// Where and how to connect: CQL_HOST (127.0.0.1), CQL_PORT (9042),
/// CQL_USER / CQL_PASSWORD (cassandra / cassandra).
pub struct Settings {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
}

impl Settings {
    pub fn from_env() -> Self {
        Settings {
            host: env_or("CQL_HOST", "127.0.0.1"),
            port: env_parse("CQL_PORT", 9042),
            user: env_or("CQL_USER", "cassandra"),
            password: env_or("CQL_PASSWORD", "cassandra"),
        }
    }

    /// Returns a session builder with the one contact point and
    /// PasswordAuthenticator credentials, otherwise the driver's defaults.
    pub fn builder(&self) -> SessionBuilder {
        let b = SessionBuilder::new()
            .known_node(format!("{}:{}", self.host, self.port))
            .user(&self.user, &self.password)
            .connection_timeout(Duration::from_secs(10));
        b
    }
}
