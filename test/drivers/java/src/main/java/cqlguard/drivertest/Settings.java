package cqlguard.drivertest;

import com.datastax.oss.driver.api.core.CqlSession;
import com.datastax.oss.driver.api.core.CqlSessionBuilder;
import com.datastax.oss.driver.api.core.config.DefaultDriverOption;
import com.datastax.oss.driver.api.core.config.DriverConfigLoader;
import com.datastax.oss.driver.api.core.config.ProgrammaticDriverConfigLoaderBuilder;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.Locale;

/** Settings both clients read from the environment, and the session builder they share. */
final class Settings {
  final String host = env("CQL_HOST", "127.0.0.1");
  final int port = Integer.parseInt(env("CQL_PORT", "9042"));
  final String user = env("CQL_USER", "cassandra");
  final String password = env("CQL_PASSWORD", "cassandra");
  final String dc = env("CQL_DC", "datacenter1");
  /** CQL_PROTOCOL: 3, 4 or 5; empty lets the driver negotiate. */
  final String protocol = env("CQL_PROTOCOL", "");
  /** CQL_COMPRESSION: none, lz4 or snappy (snappy needs protocol 4 or lower). */
  final String compression = env("CQL_COMPRESSION", "none");

  static String env(String name, String def) {
    String v = System.getenv(name);
    return v == null || v.isEmpty() ? def : v;
  }

  /**
   * Returns a config builder with the timeouts of a test that talks to a
   * single node through a proxy, and the protocol version and compression
   * asked for.
   */
  ProgrammaticDriverConfigLoaderBuilder config(Duration requestTimeout) {
    ProgrammaticDriverConfigLoaderBuilder c =
        DriverConfigLoader.programmaticBuilder()
            .withDuration(DefaultDriverOption.CONNECTION_CONNECT_TIMEOUT, Duration.ofSeconds(10))
            .withDuration(DefaultDriverOption.CONNECTION_INIT_QUERY_TIMEOUT, Duration.ofSeconds(10))
            .withDuration(DefaultDriverOption.CONTROL_CONNECTION_TIMEOUT, Duration.ofSeconds(10))
            .withDuration(DefaultDriverOption.REQUEST_TIMEOUT, requestTimeout)
            .withDuration(DefaultDriverOption.METADATA_SCHEMA_REQUEST_TIMEOUT, requestTimeout)
            .withDuration(DefaultDriverOption.CONTROL_CONNECTION_AGREEMENT_TIMEOUT, Duration.ofSeconds(30))
            // the tests switch keyspaces with USE on purpose
            .withBoolean(DefaultDriverOption.REQUEST_WARN_IF_SET_KEYSPACE, false);
    // The event loops' shutdown quiet period stays the driver's (2 s), which
    // close() waits out: close() submits its work to the admin loop and then
    // adds a listener to it, and with no quiet period that loop may have run
    // the work and terminated in between, when netty logs a
    // RejectedExecutionException with its stack trace.
    if (!protocol.isEmpty()) {
      c = c.withString(DefaultDriverOption.PROTOCOL_VERSION, "V" + protocol);
    }
    if (!compression.equals("none")) {
      c = c.withString(DefaultDriverOption.PROTOCOL_COMPRESSION, compression.toLowerCase(Locale.ROOT));
    }
    return c;
  }

  /** Returns a session builder for CQL_HOST:CQL_PORT with a password login. */
  CqlSessionBuilder session(ProgrammaticDriverConfigLoaderBuilder config) {
    return session(config, new InetSocketAddress(host, port));
  }

  /** Returns a session builder for the node at the given address with a password login. */
  CqlSessionBuilder session(ProgrammaticDriverConfigLoaderBuilder config, InetSocketAddress at) {
    return CqlSession.builder()
        .addContactPoint(at)
        .withLocalDatacenter(dc)
        .withAuthCredentials(user, password)
        .withConfigLoader(config.build());
  }
}
