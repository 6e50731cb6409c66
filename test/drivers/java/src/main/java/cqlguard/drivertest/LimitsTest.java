package cqlguard.drivertest;

import com.datastax.oss.driver.api.core.CqlSession;
import com.datastax.oss.driver.api.core.config.DefaultDriverOption;
import com.datastax.oss.driver.api.core.config.DriverExecutionProfile;
import com.datastax.oss.driver.api.core.cql.PreparedStatement;
import com.datastax.oss.driver.api.core.cql.SimpleStatement;
import com.datastax.oss.driver.api.core.servererrors.InvalidConfigurationInQueryException;
import com.datastax.oss.driver.internal.core.specex.NoSpeculativeExecutionPolicy;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * Floods one partition through a cqlguard that limits it, with the Java
 * driver, and checks what the driver sees of each refused request.
 *
 * <p>The Java driver does not opt in to SCYLLA_RATE_LIMIT_ERROR, so a refusal
 * is Config_error with ScyllaDB's message, which the driver raises as
 * InvalidConfigurationInQueryException; so is a client class over its
 * request unit budget, whose message names the class
 * (LIMIT_EXPECT=class_budget). It must not retry either: the statements are
 * marked idempotent, so that any error the driver might retry reaches
 * RecordingRetryPolicy, which records it and rethrows; the run must end with
 * no decision recorded, and speculative executions are off. The caller also
 * counts the requests the proxy saw.
 *
 * <p>Environment: CQL_HOST, CQL_PORT, CQL_USER, CQL_PASSWORD, CQL_DC;
 * LIMIT_KEYSPACE and LIMIT_TABLE, a table (k int, c int, PRIMARY KEY (k, c))
 * limited for reads and writes; LIMIT_KEY, the partition to flood; LIMIT_N,
 * requests per operation (50); LIMIT_EXPECT, config_error or class_budget
 * (both Config_error, the only kind this driver can see); LIMIT_CLASS, the
 * client class a class_budget refusal names.
 *
 * <p>Prints the first refusal of each operation, then one JSON line:
 * {"write": {"accepted": n, "refused": n}, "read": {...}, "retry_decisions":
 * n, "seconds": s}; exits 1 on anything unexpected.
 */
public final class LimitsTest {
  private LimitsTest() {}

  private interface Op {
    void run(int i);
  }

  static void fail(String msg) {
    System.out.println("FAIL " + msg);
    System.out.flush();
    System.exit(1);
  }

  public static void main(String[] args) {
    Settings s = new Settings();
    String ks = Settings.env("LIMIT_KEYSPACE", "cqlguard_limits");
    String table = Settings.env("LIMIT_TABLE", "hot");
    int key = Integer.parseInt(Settings.env("LIMIT_KEY", "30"));
    int n = Integer.parseInt(Settings.env("LIMIT_N", "50"));
    String expect = Settings.env("LIMIT_EXPECT", "config_error");
    if (!expect.equals("config_error") && !expect.equals("class_budget")) {
      System.err.println("LIMIT_EXPECT=" + expect + ": the Java driver sees only config_error or class_budget");
      System.exit(2);
    }
    String clientClass = Settings.env("LIMIT_CLASS", "default");

    CqlSession session =
        s.session(
                s.config(Duration.ofSeconds(20))
                    .withString(DefaultDriverOption.REQUEST_CONSISTENCY, "ONE")
                    .withBoolean(DefaultDriverOption.REQUEST_DEFAULT_IDEMPOTENCE, true)
                    .withString(DefaultDriverOption.RETRY_POLICY_CLASS, RecordingRetryPolicy.class.getName())
                    .withClass(DefaultDriverOption.SPECULATIVE_EXECUTION_POLICY_CLASS, NoSpeculativeExecutionPolicy.class))
            .build();
    // The policies the driver built from the configuration are ours.
    String profile = DriverExecutionProfile.DEFAULT_NAME;
    if (!(session.getContext().getRetryPolicy(profile) instanceof RecordingRetryPolicy)) {
      fail("retry policy is " + session.getContext().getRetryPolicy(profile).getClass().getName());
    }
    if (!(session.getContext().getSpeculativeExecutionPolicy(profile) instanceof NoSpeculativeExecutionPolicy)) {
      fail("speculative execution policy is "
          + session.getContext().getSpeculativeExecutionPolicy(profile).getClass().getName());
    }

    PreparedStatement insert = session.prepare("INSERT INTO " + ks + "." + table + " (k, c) VALUES (?, ?)");
    // A SELECT with its value bound in the QUERY message, not prepared.
    String select = "SELECT c FROM " + ks + "." + table + " WHERE k = ? LIMIT 1";
    String message = "Per-partition rate limit reached for %s in table " + ks + "." + table + ", rejected by coordinator";
    if (expect.equals("class_budget")) {
      message = "client class " + clientClass + " is over its budget";
    }

    Map<String, Op> ops = new LinkedHashMap<>();
    ops.put("write", i -> session.execute(insert.bind(key, i)));
    ops.put("read", i -> session.execute(SimpleStatement.newInstance(select, key)));
    StringBuilder json = new StringBuilder("{");
    int[] refusedBy = new int[2];
    int opIndex = 0;
    long start = System.nanoTime();
    for (Map.Entry<String, Op> e : ops.entrySet()) {
      String op = e.getKey();
      int accepted = 0;
      int refused = 0;
      for (int i = 0; i < n; i++) {
        try {
          e.getValue().run(i);
          accepted++;
        } catch (RuntimeException err) {
          if (err.getClass() != InvalidConfigurationInQueryException.class) {
            fail(op + ": " + err.getClass().getName() + ": " + err.getMessage()
                + "; want InvalidConfigurationInQueryException");
          }
          String want = String.format(message, op);
          if (err.getMessage() == null || !err.getMessage().contains(want)) {
            fail(op + ": message " + err.getMessage() + "; want \"" + want + "\"");
          }
          if (refused == 0) {
            System.out.println("refused " + op + ": " + err.getClass().getName() + ": " + err.getMessage());
          }
          refused++;
        }
      }
      refusedBy[opIndex++] = refused;
      json.append(String.format("\"%s\": {\"accepted\": %d, \"refused\": %d}, ", op, accepted, refused));
    }
    double seconds = (System.nanoTime() - start) / 1e9;
    session.close();
    json.append(String.format(Locale.ROOT, "\"retry_decisions\": %d, \"seconds\": %.3f}", RecordingRetryPolicy.DECISIONS.size(), seconds));
    System.out.println(json);
    System.out.flush();
    if (!RecordingRetryPolicy.DECISIONS.isEmpty()) {
      fail("the driver consulted its retry policy: " + RecordingRetryPolicy.DECISIONS);
    }
    if (refusedBy[0] == 0) {
      fail("no write was refused");
    }
    if (refusedBy[1] == 0) {
      fail("no read was refused");
    }
    System.exit(0);
  }
}
