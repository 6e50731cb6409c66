package cqlguard.drivertest;

import com.datastax.oss.driver.api.core.AllNodesFailedException;
import com.datastax.oss.driver.api.core.CqlSession;
import com.datastax.oss.driver.api.core.config.DefaultDriverOption;
import com.datastax.oss.driver.api.core.config.DriverExecutionProfile;
import com.datastax.oss.driver.api.core.config.ProgrammaticDriverConfigLoaderBuilder;
import com.datastax.oss.driver.api.core.cql.PreparedStatement;
import com.datastax.oss.driver.api.core.cql.SimpleStatement;
import com.datastax.oss.driver.api.core.servererrors.InvalidConfigurationInQueryException;
import com.datastax.oss.driver.api.core.servererrors.OverloadedException;
import com.datastax.oss.driver.internal.core.specex.NoSpeculativeExecutionPolicy;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;

/**
 * Floods one partition through a cqlguard that refuses its requests, with
 * the Java driver, and checks what the driver sees of each refused request.
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
 * <p>A request shed while its node is slow (LIMIT_EXPECT=shed) must be
 * refused every time with Overloaded and cqlguard's message for tier
 * LIMIT_TIER and node LIMIT_NODE. Here the driver keeps its defaults:
 * statements are not idempotent, and RecordingDefaultRetryPolicy, the
 * default policy, records what it decides. The driver asks its policy about
 * Overloaded only for idempotent statements (it retries those on the next
 * node), so each shed request fails at once with OverloadedException and no
 * decision is recorded; had it been retried through the query plan, the
 * error would be an AllNodesFailedException holding the
 * OverloadedException, which is unwrapped and reported as such.
 *
 * <p>Environment: CQL_HOST, CQL_PORT, CQL_USER, CQL_PASSWORD, CQL_DC;
 * LIMIT_KEYSPACE and LIMIT_TABLE, a table (k int, c int, PRIMARY KEY (k, c))
 * limited for reads and writes; LIMIT_KEY, the partition to flood; LIMIT_N,
 * requests per operation (50); LIMIT_EXPECT, config_error, class_budget
 * (both Config_error, the only rate limit this driver can see) or shed;
 * LIMIT_CLASS, the client class a class_budget refusal names; LIMIT_TIER and
 * LIMIT_NODE, the tier and node a shed refusal names.
 *
 * <p>Prints the first refusal of each operation, then one JSON line:
 * {"write": {"accepted": n, "refused": n}, "read": {...}, "retry_consulted":
 * n, "retry_decisions": n, "seconds": s}, where retry_decisions counts the
 * decisions to retry; in shed mode also "surfaced", what each refusal threw.
 * Exits 1 on anything unexpected.
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
    if (!expect.equals("config_error") && !expect.equals("class_budget") && !expect.equals("shed")) {
      System.err.println("LIMIT_EXPECT=" + expect + ": the Java driver sees only config_error, class_budget or shed");
      System.exit(2);
    }
    boolean shed = expect.equals("shed");
    String clientClass = Settings.env("LIMIT_CLASS", "default");

    ProgrammaticDriverConfigLoaderBuilder config =
        s.config(Duration.ofSeconds(20))
            .withString(DefaultDriverOption.REQUEST_CONSISTENCY, "ONE")
            .withClass(DefaultDriverOption.SPECULATIVE_EXECUTION_POLICY_CLASS, NoSpeculativeExecutionPolicy.class);
    // Shedding is checked with the driver's defaults; the other refusals
    // with idempotent statements, so that any error the driver might retry
    // reaches RecordingRetryPolicy.
    Class<?> retryPolicy = RecordingDefaultRetryPolicy.class;
    if (!shed) {
      retryPolicy = RecordingRetryPolicy.class;
      config = config.withBoolean(DefaultDriverOption.REQUEST_DEFAULT_IDEMPOTENCE, true);
    }
    CqlSession session =
        s.session(config.withString(DefaultDriverOption.RETRY_POLICY_CLASS, retryPolicy.getName())).build();
    // The policies the driver built from the configuration are ours.
    String profile = DriverExecutionProfile.DEFAULT_NAME;
    if (!retryPolicy.isInstance(session.getContext().getRetryPolicy(profile))) {
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
    } else if (shed) {
      message = "cqlguard: request shed, tier " + Settings.env("LIMIT_TIER", "1") + ", while the node "
          + Settings.env("LIMIT_NODE", "127.0.0.2:9042") + " is slow (shedding); retry later";
    }
    TreeSet<String> surfaced = new TreeSet<>();

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
          if (shed) {
            surfaced.add(checkShed(err, op, message));
          } else {
            checkRefusal(err, op, String.format(message, op));
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
    int consulted = RecordingRetryPolicy.DECISIONS.size() + RecordingDefaultRetryPolicy.DECISIONS.size();
    json.append(String.format(Locale.ROOT, "\"retry_consulted\": %d, \"retry_decisions\": %d, ",
        consulted, RecordingDefaultRetryPolicy.retries()));
    if (shed) {
      json.append(String.format("\"surfaced\": \"%s\", ", String.join(" | ", surfaced)));
    }
    json.append(String.format(Locale.ROOT, "\"seconds\": %.3f}", seconds));
    System.out.println(json);
    System.out.flush();
    if (shed) {
      if (surfaced.size() != 1) {
        fail("refusals surfaced as " + surfaced + "; want one kind");
      }
      if (refusedBy[0] != n || refusedBy[1] != n) {
        fail("not every request was shed");
      }
    } else if (!RecordingRetryPolicy.DECISIONS.isEmpty()) {
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

  /** Fails unless err is the Config_error of a rate limit or a class budget, with message want. */
  private static void checkRefusal(RuntimeException err, String op, String want) {
    if (err.getClass() != InvalidConfigurationInQueryException.class) {
      fail(op + ": " + err.getClass().getName() + ": " + err.getMessage()
          + "; want InvalidConfigurationInQueryException");
    }
    if (err.getMessage() == null || !err.getMessage().contains(want)) {
      fail(op + ": message " + err.getMessage() + "; want \"" + want + "\"");
    }
  }

  /**
   * Fails unless err is a shed request's Overloaded with message want, alone
   * or as the errors of every node an AllNodesFailedException tried, and
   * returns what was thrown.
   */
  private static String checkShed(RuntimeException err, String op, String want) {
    String what = err.getClass().getSimpleName();
    List<Throwable> errors = new ArrayList<>(List.of(err));
    if (err instanceof AllNodesFailedException) {
      errors.clear();
      ((AllNodesFailedException) err).getAllErrors().values().forEach(errors::addAll);
      List<String> names = new ArrayList<>();
      errors.forEach(e -> names.add(e.getClass().getSimpleName()));
      what += "(" + String.join(", ", names) + ")";
    }
    if (errors.isEmpty()) {
      fail(op + ": " + err + "; want OverloadedException");
    }
    for (Throwable e : errors) {
      if (e.getClass() != OverloadedException.class) {
        fail(op + ": " + e.getClass().getName() + ": " + e.getMessage() + "; want OverloadedException");
      }
      if (e.getMessage() == null || !e.getMessage().endsWith(" is overloaded: " + want)) {
        fail(op + ": message " + e.getMessage() + "; want \"... is overloaded: " + want + "\"");
      }
    }
    return what;
  }
}
