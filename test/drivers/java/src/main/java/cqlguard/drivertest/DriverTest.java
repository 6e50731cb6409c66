package cqlguard.drivertest;

import com.datastax.oss.driver.api.core.CqlSession;
import com.datastax.oss.driver.api.core.DefaultProtocolVersion;
import com.datastax.oss.driver.api.core.ProtocolVersion;
import com.datastax.oss.driver.api.core.cql.AsyncResultSet;
import com.datastax.oss.driver.api.core.cql.BatchStatement;
import com.datastax.oss.driver.api.core.cql.BatchStatementBuilder;
import com.datastax.oss.driver.api.core.cql.BatchType;
import com.datastax.oss.driver.api.core.cql.PreparedStatement;
import com.datastax.oss.driver.api.core.cql.ResultSet;
import com.datastax.oss.driver.api.core.cql.Row;
import com.datastax.oss.driver.api.core.cql.SimpleStatement;
import com.datastax.oss.driver.api.core.cql.Statement;
import com.datastax.oss.driver.api.core.metadata.EndPoint;
import com.datastax.oss.driver.api.core.metadata.Node;
import com.datastax.oss.driver.api.core.metadata.NodeState;
import com.datastax.oss.driver.api.core.metadata.schema.ColumnMetadata;
import com.datastax.oss.driver.api.core.metadata.schema.TableMetadata;
import com.datastax.oss.driver.api.core.servererrors.CoordinatorException;
import com.datastax.oss.driver.api.core.servererrors.InvalidQueryException;
import com.datastax.oss.driver.api.core.servererrors.SyntaxError;
import com.datastax.oss.driver.internal.core.context.InternalDriverContext;
import com.datastax.oss.driver.internal.core.pool.ChannelPool;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Exercises a CQL endpoint with the Apache Cassandra Java driver 4.x, as a
 * user would, and checks what a transparent proxy must preserve: the driver
 * sees only the expected hosts (the proxy), results, paging, keyspace
 * switching and errors come through unchanged.
 *
 * <p>Environment: CQL_HOST (127.0.0.1), CQL_PORT (9042), CQL_USER /
 * CQL_PASSWORD (cassandra / cassandra), CQL_KEYSPACE (cqlguard_java; dropped
 * and recreated), EXPECT_HOSTS (comma-separated, default CQL_HOST),
 * CQL_PROTOCOL (3, 4 or 5; empty negotiates), CQL_COMPRESSION (none, lz4 or
 * snappy), CQL_DC (local data center, datacenter1), CQL_TEST_TIMEOUT
 * (seconds, 300).
 *
 * <p>Prints one line per step, the failing step's error, and a closing
 * "java-driver: N passed, N failed" line; exits 1 on the first failure.
 */
public final class DriverTest {
  private static final int ROWS = 6000;
  private static final int FETCH = 500;

  private final Settings s = new Settings();
  private final String ks = Settings.env("CQL_KEYSPACE", "cqlguard_java");
  private final List<String> expect;
  private CqlSession session;
  private int passed;
  private int failed;

  private DriverTest() {
    List<String> hosts = new ArrayList<>();
    for (String h : Settings.env("EXPECT_HOSTS", s.host).split(",")) {
      if (!h.isBlank()) {
        hosts.add(h.trim());
      }
    }
    hosts.sort(null);
    expect = hosts;
  }

  private interface Body {
    void run() throws Exception;
  }

  private synchronized void finish() {
    System.out.printf("java-driver: %d passed, %d failed%n", passed, failed);
    System.out.flush();
    // halt, not exit: the driver's threads must not keep a failed run alive.
    Runtime.getRuntime().halt(failed > 0 ? 1 : 0);
  }

  private void step(String name, Body body) {
    long t0 = System.nanoTime();
    try {
      body.run();
    } catch (Throwable e) {
      synchronized (this) {
        failed++;
        System.out.printf("FAIL %s: %s: %s%n", name, e.getClass().getName(), e.getMessage());
        e.printStackTrace(System.out);
      }
      if (session != null) {
        try {
          session.forceCloseAsync().toCompletableFuture().get(2, TimeUnit.SECONDS);
        } catch (Exception ignored) {
          // the run has failed already; closing is best effort
        }
      }
      finish();
    }
    passed++;
    System.out.printf(Locale.ROOT, "ok   %s (%.2fs)%n", name, (System.nanoTime() - t0) / 1e9);
  }

  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  static void eq(Object got, Object want, String what) {
    if (!Objects.equals(got, want)) {
      throw new AssertionError(what + ": got " + got + ", want " + want);
    }
  }

  /** Returns the host address of an endpoint, "ip". */
  static String hostOf(EndPoint ep) {
    SocketAddress a = ep.resolve();
    return a instanceof InetSocketAddress i ? i.getAddress().getHostAddress() : a.toString();
  }

  static int portOf(EndPoint ep) {
    SocketAddress a = ep.resolve();
    return a instanceof InetSocketAddress i ? i.getPort() : -1;
  }

  /** Returns the sorted host addresses of the nodes the driver knows. */
  List<String> nodeHosts() {
    List<String> hosts = new ArrayList<>();
    for (Node n : session.getMetadata().getNodes().values()) {
      hosts.add(hostOf(n.getEndPoint()));
    }
    hosts.sort(null);
    return hosts;
  }

  /** Checks every endpoint the driver knows is CQL_PORT on one of EXPECT_HOSTS. */
  void checkNodes() {
    eq(nodeHosts(), expect, "metadata nodes");
    for (Node n : session.getMetadata().getNodes().values()) {
      eq(portOf(n.getEndPoint()), s.port, "port of node " + n.getEndPoint());
    }
  }

  /**
   * Runs body, which must throw a coordinator error of the given class whose
   * message contains part, answered by one of EXPECT_HOSTS.
   */
  void expectError(String what, Body body, Class<? extends CoordinatorException> want, String part)
      throws Exception {
    Throwable err = null;
    try {
      body.run();
    } catch (Throwable e) {
      err = e;
    }
    check(err != null, "no error for " + what);
    check(err.getClass() == want,
        what + ": got " + err.getClass().getName() + " (" + err.getMessage() + "), want " + want.getName());
    check(err.getMessage() != null && err.getMessage().contains(part),
        what + ": message \"" + err.getMessage() + "\" does not contain \"" + part + "\"");
    Node coordinator = ((CoordinatorException) err).getCoordinator();
    check(expect.contains(hostOf(coordinator.getEndPoint())), what + ": answered by " + coordinator.getEndPoint());
  }

  /** Returns rows as "c:v" strings, v "null" when unset. */
  static List<String> cv(Iterable<Row> rows) {
    List<String> out = new ArrayList<>();
    for (Row r : rows) {
      out.add(r.getInt("c") + ":" + r.getString("v"));
    }
    return out;
  }

  /**
   * Reads every page of query by hand, passing each page's paging state to
   * the next request as a web application does, and returns the rows.
   */
  List<String> pageByHand(Statement<?> query, int[] pages) {
    List<String> got = new ArrayList<>();
    ByteBuffer state = null;
    do {
      ResultSet rs = session.execute(query.setPagingState(state));
      int page = rs.getAvailableWithoutFetching();
      check(page <= FETCH, "a page of " + page + " rows");
      for (int i = 0; i < page; i++) {
        Row r = rs.one();
        got.add(r.getInt("c") + ":" + r.getString("v"));
      }
      state = rs.getExecutionInfo().getPagingState();
      pages[0]++;
    } while (state != null);
    return got;
  }

  private void run() {
    long started = System.nanoTime();
    int timeout = Integer.parseInt(Settings.env("CQL_TEST_TIMEOUT", "300"));
    Thread watchdog = new Thread(() -> {
      try {
        Thread.sleep(timeout * 1000L);
      } catch (InterruptedException e) {
        return;
      }
      synchronized (this) {
        failed++;
        System.out.printf("FAIL the whole run took more than %ds (CQL_TEST_TIMEOUT)%n", timeout);
      }
      finish();
    });
    watchdog.setDaemon(true);
    watchdog.start();

    step("1. connect; the driver's view of the cluster is exactly EXPECT_HOSTS", () -> {
      session = s.session(s.config(Duration.ofSeconds(30))).build();
      checkNodes();
      ProtocolVersion version = session.getContext().getProtocolVersion();
      if (!s.protocol.isEmpty()) {
        eq(version.getCode(), Integer.parseInt(s.protocol), "negotiated protocol version");
      }
      Node node = session.getMetadata().getNodes().values().iterator().next();
      System.out.printf("     protocol %s, compression %s, %d node(s); %s in %s, Cassandra %s%n", version,
          s.compression, session.getMetadata().getNodes().size(), node.getEndPoint(), node.getDatacenter(),
          node.getCassandraVersion());
      eq(node.getState(), NodeState.UP, "state of " + node.getEndPoint());
    });

    step("2. create keyspace (SimpleStrategy rf 1) and table (composite partition key, clustering column)", () -> {
      session.execute("DROP KEYSPACE IF EXISTS " + ks);
      session.execute("CREATE KEYSPACE " + ks
          + " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}");
      ResultSet rs = session.execute("CREATE TABLE " + ks + ".t (a int, b text, c int, v text, PRIMARY KEY ((a, b), c))");
      check(rs.getExecutionInfo().isSchemaInAgreement(), "schema agreement after CREATE TABLE");
      TableMetadata table = session.getMetadata().getKeyspace(ks).flatMap(k -> k.getTable("t"))
          .orElseThrow(() -> new AssertionError("table " + ks + ".t missing from the driver's metadata"));
      List<String> pk = new ArrayList<>();
      for (ColumnMetadata c : table.getPartitionKey()) {
        pk.add(c.getName().asInternal());
      }
      eq(pk, List.of("a", "b"), "partition key");
      List<String> ck = new ArrayList<>();
      for (ColumnMetadata c : table.getClusteringColumns().keySet()) {
        ck.add(c.getName().asInternal());
      }
      eq(ck, List.of("c"), "clustering columns");
    });

    step("3. insert and select: inline literals, bound values and prepared statements", () -> {
      session.execute("INSERT INTO " + ks + ".t (a, b, c, v) VALUES (1, 'x', 1, 'inline')");
      Row r = session.execute("SELECT a, b, c, v FROM " + ks + ".t WHERE a = 1 AND b = 'x' AND c = 1").one();
      check(r != null, "no row");
      eq(List.of(r.getInt("a"), r.getString("b"), r.getInt("c"), r.getString("v")), List.of(1, "x", 1, "inline"),
          "row");
      PreparedStatement ins = session.prepare("INSERT INTO " + ks + ".t (a, b, c, v) VALUES (?, ?, ?, ?)");
      session.execute(ins.bind(1, "x", 2, "prepared"));
      session.execute(ins.bind(1, "x", 3, null));
      PreparedStatement sel = session.prepare("SELECT c, v FROM " + ks + ".t WHERE a = ? AND b = ?");
      eq(cv(session.execute(sel.bind(1, "x"))), List.of("1:inline", "2:prepared", "3:null"), "prepared select");
      // values bound in a QUERY message, not prepared
      r = session.execute(SimpleStatement.newInstance(
          "SELECT v FROM " + ks + ".t WHERE a = ? AND b = ? AND c = ?", 1, "x", 2)).one();
      eq(r == null ? null : r.getString("v"), "prepared", "select with bound values");
      // named values in a QUERY message
      r = session.execute(SimpleStatement.builder("SELECT v FROM " + ks + ".t WHERE a = :a AND b = :b AND c = :c")
          .addNamedValue("a", 1).addNamedValue("b", "x").addNamedValue("c", 1).build()).one();
      eq(r == null ? null : r.getString("v"), "inline", "select with named values");
    });

    step("4. batches, unlogged and logged, read back", () -> {
      PreparedStatement ins = session.prepare("INSERT INTO " + ks + ".t (a, b, c, v) VALUES (?, ?, ?, ?)");
      for (Object[] t : new Object[][] {{2, BatchType.UNLOGGED}, {3, BatchType.LOGGED}}) {
        int a = (Integer) t[0];
        BatchType type = (BatchType) t[1];
        BatchStatementBuilder b = BatchStatement.builder(type);
        for (int c = 0; c < 5; c++) {
          b.addStatement(ins.bind(a, "batch", c, "b" + c));
        }
        session.execute(b.build());
        // and an all-literal batch, not prepared, with a bound-value statement
        session.execute(BatchStatement.newInstance(type,
            SimpleStatement.newInstance("INSERT INTO " + ks + ".t (a, b, c, v) VALUES (" + a + ", 'batch', 5, 'inline')"),
            SimpleStatement.newInstance("INSERT INTO " + ks + ".t (a, b, c, v) VALUES (?, 'batch', 6, ?)", a, "bound")));
        List<String> got = cv(session.execute("SELECT c, v FROM " + ks + ".t WHERE a = " + a + " AND b = 'batch'"));
        eq(got, List.of("0:b0", "1:b1", "2:b2", "3:b3", "4:b4", "5:inline", "6:bound"), "batch " + type);
      }
    });

    step("5. paging: " + ROWS + " rows in one partition, page size " + FETCH, () -> {
      PreparedStatement ins = session.prepare("INSERT INTO " + ks + ".t (a, b, c, v) VALUES (9, 'paged', ?, ?)");
      Semaphore window = new Semaphore(64);
      AtomicReference<Throwable> insertErr = new AtomicReference<>();
      List<CompletableFuture<AsyncResultSet>> writes = new ArrayList<>();
      List<String> want = new ArrayList<>();
      for (int c = 0; c < ROWS; c++) {
        want.add(c + ":v" + c);
        window.acquire();
        CompletableFuture<AsyncResultSet> f = session.executeAsync(ins.bind(c, "v" + c)).toCompletableFuture();
        f.whenComplete((rs, e) -> {
          if (e != null) {
            insertErr.compareAndSet(null, e);
          }
          window.release();
        });
        writes.add(f);
      }
      CompletableFuture.allOf(writes.toArray(new CompletableFuture<?>[0])).exceptionally(e -> null).get(120, TimeUnit.SECONDS);
      if (insertErr.get() != null) {
        throw new AssertionError("insert error", insertErr.get());
      }
      String query = "SELECT c, v FROM " + ks + ".t WHERE a = 9 AND b = 'paged'";
      PreparedStatement sel = session.prepare(query);
      for (Statement<?> st : List.of(SimpleStatement.newInstance(query).setPageSize(FETCH),
          sel.bind().setPageSize(FETCH))) {
        String kind = st instanceof SimpleStatement ? "simple" : "prepared";
        int[] pages = {0};
        List<String> got = pageByHand(st, pages);
        eq(got.size(), ROWS, kind + ": rows over " + pages[0] + " pages");
        check(got.equals(want), kind + ": rows out of order or wrong");
        check(pages[0] >= ROWS / FETCH, kind + ": " + pages[0] + " pages");
        // automatic paging: the driver fetches the next pages as the rows are read
        int n = 0;
        for (Row r : session.execute(st)) {
          eq(r.getInt("c"), n, kind + ": row read with automatic paging");
          n++;
        }
        eq(n, ROWS, kind + ": rows read with automatic paging");
      }
      // asynchronous paging, page by page
      int n = 0;
      int pages = 0;
      AsyncResultSet page = session.executeAsync(sel.bind().setPageSize(FETCH)).toCompletableFuture().get(30, TimeUnit.SECONDS);
      while (true) {
        pages++;
        for (Row r : page.currentPage()) {
          eq(r.getInt("c"), n, "row read with asynchronous paging");
          n++;
        }
        if (!page.hasMorePages()) {
          break;
        }
        CompletionStage<AsyncResultSet> next = page.fetchNextPage();
        page = next.toCompletableFuture().get(30, TimeUnit.SECONDS);
      }
      eq(n, ROWS, "rows read with asynchronous paging over " + pages + " pages");
      Row r = session.execute("SELECT count(*) AS n FROM " + ks + ".t WHERE a = 9 AND b = 'paged'").one();
      eq(r == null ? null : r.getLong("n"), (long) ROWS, "count(*)");
    });

    step("6. USE keyspace, then unqualified queries (simple and prepared)", () -> {
      session.execute("USE " + ks);
      Row r = session.execute("SELECT v FROM t WHERE a = 1 AND b = 'x' AND c = 1").one();
      eq(r == null ? null : r.getString("v"), "inline", "simple select after USE");
      PreparedStatement sel = session.prepare("SELECT v FROM t WHERE a = ? AND b = ? AND c = ?");
      r = session.execute(sel.bind(1, "x", 2)).one();
      eq(r == null ? null : r.getString("v"), "prepared", "prepared select after USE");
    });

    if (session.getContext().getProtocolVersion().getCode() >= DefaultProtocolVersion.V5.getCode()) {
      step("6b. protocol v5: a keyspace per statement, not the session's (QUERY and PREPARE)", () -> {
        // the session's keyspace is ks now; system has a table "local"
        Row r = session.execute(SimpleStatement.newInstance("SELECT key FROM local").setKeyspace("system")).one();
        eq(r == null ? null : r.getString("key"), "local", "simple statement with its own keyspace");
        PreparedStatement p = session.prepare(
            SimpleStatement.newInstance("SELECT key FROM local WHERE key = ?").setKeyspace("system"));
        r = session.execute(p.bind("local")).one();
        eq(r == null ? null : r.getString("key"), "local", "prepared statement with its own keyspace");
      });
    }

    step("7. errors reach the driver unchanged", () -> {
      expectError("SELECT from a missing table", () -> session.execute("SELECT * FROM " + ks + ".missing_table"),
          InvalidQueryException.class, "missing_table");
      expectError("PREPARE against a missing table",
          () -> session.prepare("SELECT * FROM " + ks + ".missing_table WHERE a = ?"),
          InvalidQueryException.class, "missing_table");
      expectError("a syntax error", () -> session.execute("SELEC nonsense"), SyntaxError.class, "SELEC");
      // the session still works after errors
      Row r = session.execute("SELECT v FROM t WHERE a = 1 AND b = 'x' AND c = 1").one();
      eq(r == null ? null : r.getString("v"), "inline", "select after errors");
    });

    step("8. drop keyspace", () -> {
      session.execute("DROP KEYSPACE " + ks);
      check(session.getMetadata().getKeyspace(ks).isEmpty(), "keyspace still in the driver's metadata");
    });

    step("9. after all steps the driver has open connections only to EXPECT_HOSTS; close", () -> {
      checkNodes();
      for (Node n : session.getMetadata().getNodes().values()) {
        check(n.getOpenConnections() >= 1, "no open connection to " + n.getEndPoint());
        eq(n.getState(), NodeState.UP, "state of " + n.getEndPoint());
      }
      // Internal API, for what the public one does not show: the control
      // connection and every connection pool are to EXPECT_HOSTS.
      InternalDriverContext ctx = (InternalDriverContext) session.getContext();
      EndPoint control = ctx.getControlConnection().channel().getEndPoint();
      check(expect.contains(hostOf(control)) && portOf(control) == s.port, "control connection to " + control);
      Map<Node, ChannelPool> pools = ctx.getPoolManager().getPools();
      check(!pools.isEmpty(), "no connection pool");
      for (Map.Entry<Node, ChannelPool> e : pools.entrySet()) {
        EndPoint ep = e.getKey().getEndPoint();
        check(expect.contains(hostOf(ep)) && portOf(ep) == s.port, "connection pool to " + ep);
        check(e.getValue().size() >= 1, "pool to " + ep + " has no connection");
      }
      session.close();
    });

    System.out.printf(Locale.ROOT, "     total %.2fs%n", (System.nanoTime() - started) / 1e9);
    finish();
  }

  public static void main(String[] args) {
    new DriverTest().run();
  }
}
