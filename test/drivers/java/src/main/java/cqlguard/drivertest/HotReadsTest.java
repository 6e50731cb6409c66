package cqlguard.drivertest;

import com.datastax.oss.driver.api.core.CqlSession;
import com.datastax.oss.driver.api.core.config.DefaultDriverOption;
import com.datastax.oss.driver.api.core.cql.AsyncResultSet;
import com.datastax.oss.driver.api.core.cql.ColumnDefinition;
import com.datastax.oss.driver.api.core.cql.PreparedStatement;
import com.datastax.oss.driver.api.core.cql.Row;
import com.datastax.oss.driver.api.core.cql.SimpleStatement;
import com.datastax.oss.driver.api.core.cql.Statement;
import com.datastax.oss.driver.api.core.data.ByteUtils;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Reads a hot partition through a cqlguard that serves hot reads
 * (coalescing and a short cache) with the Apache Cassandra Java driver 4.x,
 * and checks that every answer decodes as a direct read's does, and that a
 * client reads back each of its writes while others read the same row.
 *
 * <ol>
 *   <li>Reference: SELECT * FROM kv WHERE k = 1 (page size 10) and k = 2
 *       (page size 100, only tombstones: Cassandra warns) read directly from
 *       the node, every page, as a simple and as a prepared statement: each
 *       page's rows (decoded and raw), paging state, column definitions and
 *       warnings.
 *   <li>The same reads through the proxy, 200 in flight at once with
 *       executeAsync in several rounds, every page of each (half by
 *       AsyncResultSet.fetchNextPage, half by a new executeAsync with the
 *       paging state); every page must equal the reference's page.
 *   <li>Read-your-writes: async loops keep reading SELECT v FROM kv WHERE
 *       k = 1 AND c = 0 (prepared) through the proxy while a writer updates v
 *       200 times, each time reading it back with the same statement: a read
 *       back that does not give the value just written is stale.
 * </ol>
 *
 * <p>Environment: CQL_HOST / CQL_PORT (the proxy), DIRECT_HOST / DIRECT_PORT
 * (the node itself), CQL_USER, CQL_PASSWORD, CQL_DC, CQL_PROTOCOL,
 * CQL_COMPRESSION (see Settings), HOT_KEYSPACE (cqlguard_hot; the table kv
 * must exist, filled as described), HOT_ROUNDS (rounds of 200 concurrent
 * reads, 5), CQL_TEST_TIMEOUT (seconds, 300).
 *
 * <p>Prints one JSON line: {"reads": n, "pages": n, "warnings": n, "writes":
 * n, "stale": n, ...}; exits 1 with a FAIL line on the first difference.
 */
public final class HotReadsTest {
  private static final int IN_FLIGHT = 200;
  private static final int READERS = 32;
  private static final int WRITES = 200;
  private static final String READ_ONE = "SELECT v FROM kv WHERE k = 1 AND c = 0";

  private HotReadsTest() {}

  /** What the driver decoded of one page. */
  record Page(List<String> rows, String pagingState, List<String> columns, List<String> warnings) {}

  /** One read compared: its name and statement. */
  record Read(String name, Statement<?> statement) {}

  static void fail(String msg) {
    System.out.println("FAIL " + msg);
    System.out.flush();
    // halt, not exit: the driver's threads must not keep a failed run alive.
    Runtime.getRuntime().halt(1);
  }

  /** Returns the current page of rs, consuming its rows. */
  static Page pageOf(AsyncResultSet rs) {
    List<String> columns = new ArrayList<>();
    for (ColumnDefinition d : rs.getColumnDefinitions()) {
      columns.add(d.getKeyspace().asInternal() + "." + d.getTable().asInternal() + "."
          + d.getName().asInternal() + " " + d.getType().asCql(true, true));
    }
    List<String> rows = new ArrayList<>();
    for (Row r : rs.currentPage()) {
      // Each value as decoded and as sent: (1 0x00000001 | ...)
      StringBuilder b = new StringBuilder("(");
      for (int i = 0; i < r.getColumnDefinitions().size(); i++) {
        ByteBuffer raw = r.getBytesUnsafe(i);
        b.append(i == 0 ? "" : " | ").append(r.getObject(i))
            .append(" ").append(raw == null ? "null" : ByteUtils.toHexString(raw));
      }
      rows.add(b.append(")").toString());
    }
    ByteBuffer state = rs.getExecutionInfo().getPagingState();
    return new Page(rows, state == null ? null : ByteUtils.toHexString(state), columns,
        List.copyOf(rs.getExecutionInfo().getWarnings()));
  }

  /**
   * Reads every page of st, the next page by fetchNextPage or, with
   * byState, by a new request carrying the paging state.
   */
  static CompletionStage<List<Page>> readAll(CqlSession s, Statement<?> st, boolean byState) {
    return s.executeAsync(st).thenCompose(rs -> rest(s, st, rs, byState, new ArrayList<>()));
  }

  private static CompletionStage<List<Page>> rest(
      CqlSession s, Statement<?> st, AsyncResultSet rs, boolean byState, List<Page> pages) {
    pages.add(pageOf(rs));
    if (!rs.hasMorePages()) {
      return CompletableFuture.completedFuture(pages);
    }
    CompletionStage<AsyncResultSet> next = byState
        ? s.executeAsync(st.setPagingState(rs.getExecutionInfo().getPagingState()))
        : rs.fetchNextPage();
    return next.thenCompose(n -> rest(s, st, n, byState, pages));
  }

  static List<Read> reads(CqlSession s) {
    List<Read> out = new ArrayList<>();
    PreparedStatement p = s.prepare("SELECT * FROM kv WHERE k = ?");
    for (int[] kf : new int[][] {{1, 10}, {2, 100}}) {
      out.add(new Read("simple k=" + kf[0],
          SimpleStatement.newInstance("SELECT * FROM kv WHERE k = " + kf[0]).setPageSize(kf[1])));
      out.add(new Read("prepared k=" + kf[0], p.bind(kf[0]).setPageSize(kf[1])));
    }
    return out;
  }

  static final AtomicLong READS = new AtomicLong();
  static final AtomicLong PAGES = new AtomicLong();
  static final AtomicLong WARNINGS = new AtomicLong();

  /** Fails on the first page of got that differs from want. */
  static void compare(String what, List<Page> got, List<Page> want) {
    for (int i = 0; i < Math.min(got.size(), want.size()); i++) {
      Page g = got.get(i);
      Page w = want.get(i);
      String field = !g.rows().equals(w.rows()) ? "rows"
          : !Objects.equals(g.pagingState(), w.pagingState()) ? "paging state"
          : !g.columns().equals(w.columns()) ? "column definitions"
          : !g.warnings().equals(w.warnings()) ? "warnings"
          : null;
      if (field != null) {
        fail(what + ": page " + i + " through the proxy differs in its " + field + ":\n  proxy:  " + g
            + "\n  direct: " + w);
      }
      PAGES.incrementAndGet();
      if (!w.warnings().isEmpty()) {
        WARNINGS.incrementAndGet();
      }
    }
    if (got.size() != want.size()) {
      fail(what + ": " + got.size() + " pages through the proxy, " + want.size() + " directly");
    }
    READS.incrementAndGet();
  }

  public static void main(String[] args) throws Exception {
    Settings s = new Settings();
    String ks = Settings.env("HOT_KEYSPACE", "cqlguard_hot");
    InetSocketAddress direct = new InetSocketAddress(
        Settings.env("DIRECT_HOST", "127.0.0.2"), Integer.parseInt(Settings.env("DIRECT_PORT", "9042")));
    int rounds = Integer.parseInt(Settings.env("HOT_ROUNDS", "5"));
    int timeout = Integer.parseInt(Settings.env("CQL_TEST_TIMEOUT", "300"));
    Thread watchdog = new Thread(() -> {
      try {
        Thread.sleep(timeout * 1000L);
      } catch (InterruptedException e) {
        return;
      }
      fail("the whole run took more than " + timeout + "s (CQL_TEST_TIMEOUT)");
    });
    watchdog.setDaemon(true);
    watchdog.start();
    long started = System.nanoTime();

    // Thousands of tombstone warnings are expected; the driver would log each.
    CqlSession directSession = s.session(s.config(Duration.ofSeconds(30))
            .withBoolean(DefaultDriverOption.REQUEST_LOG_WARNINGS, false), direct)
        .withKeyspace(ks).build();
    CqlSession proxy = s.session(s.config(Duration.ofSeconds(30))
            .withBoolean(DefaultDriverOption.REQUEST_LOG_WARNINGS, false))
        .withKeyspace(ks).build();
    String version = proxy.getContext().getProtocolVersion().toString();
    if (!s.protocol.isEmpty() && !version.equals("V" + s.protocol)) {
      fail("negotiated protocol " + version + ", want V" + s.protocol);
    }

    // 1. The reference, read directly.
    Map<String, List<Page>> reference = new LinkedHashMap<>();
    for (Read r : reads(directSession)) {
      reference.put(r.name(), readAll(directSession, r.statement(), true).toCompletableFuture().get(60, TimeUnit.SECONDS));
    }
    if (reference.get("simple k=1").size() != 3) {
      fail("direct read of k = 1: " + reference.get("simple k=1").size() + " pages, want 3 (25 rows, 10 a page)");
    }
    if (reference.get("simple k=2").stream().allMatch(p -> p.warnings().isEmpty())) {
      fail("no tombstone warning reading partition 2 directly");
    }
    StringBuilder shape = new StringBuilder();
    reference.forEach((name, pages) -> shape.append(" ").append(name).append(": ").append(pages.size()));
    System.out.printf("reference: protocol %s, compression %s, pages%s%n", version, s.compression, shape);

    // 2. Rounds of IN_FLIGHT reads at once, every page of each.
    List<Read> reads = reads(proxy);
    for (int round = 0; round < rounds; round++) {
      List<CompletableFuture<List<Page>>> inFlight = new ArrayList<>();
      for (int i = 0; i < IN_FLIGHT; i++) {
        Read r = reads.get(i % reads.size());
        inFlight.add(readAll(proxy, r.statement(), i % 2 == 1).toCompletableFuture());
      }
      for (int i = 0; i < IN_FLIGHT; i++) {
        Read r = reads.get(i % reads.size());
        List<Page> got;
        try {
          got = inFlight.get(i).get(60, TimeUnit.SECONDS);
        } catch (Exception e) {
          fail(r.name() + " (round " + round + ", read " + i + "): " + e);
          return;
        }
        compare(r.name() + " (round " + round + ", read " + i + ")", got, reference.get(r.name()));
      }
    }

    // 3. Read-your-writes among concurrent reads of the same statement.
    PreparedStatement select = proxy.prepare(READ_ONE);
    PreparedStatement update = proxy.prepare("UPDATE kv SET v = ? WHERE k = 1 AND c = 0");
    AtomicBoolean stop = new AtomicBoolean();
    AtomicReference<Throwable> readError = new AtomicReference<>();
    AtomicLong concurrentReads = new AtomicLong();
    CountDownLatch readersDone = new CountDownLatch(READERS);
    for (int i = 0; i < READERS; i++) {
      keepReading(proxy, select, stop, readError, concurrentReads, readersDone);
    }
    int stale = 0;
    String firstStale = null;
    for (int i = 0; i < WRITES; i++) {
      String want = "java write " + i + " at " + System.nanoTime();
      proxy.execute(update.bind(want));
      Row row = proxy.execute(select.bind()).one();
      String got = row == null ? null : row.getString("v");
      if (!want.equals(got)) {
        stale++;
        if (firstStale == null) {
          firstStale = "read back \"" + got + "\" after writing \"" + want + "\"";
        }
      }
    }
    stop.set(true);
    if (!readersDone.await(60, TimeUnit.SECONDS)) {
      fail("the concurrent readers did not stop");
    }
    if (readError.get() != null) {
      fail("a concurrent read of \"" + READ_ONE + "\" failed: " + readError.get());
    }

    System.out.printf(Locale.ROOT,
        "{\"protocol\": \"%s\", \"compression\": \"%s\", \"reads\": %d, \"pages\": %d, \"warnings\": %d, "
            + "\"writes\": %d, \"stale\": %d, \"concurrent_reads\": %d, \"seconds\": %.3f}%n",
        version, s.compression, READS.get(), PAGES.get(), WARNINGS.get(), WRITES, stale, concurrentReads.get(),
        (System.nanoTime() - started) / 1e9);
    System.out.flush();
    if (stale > 0) {
      fail(stale + " of " + WRITES + " writes not read back: first, " + firstStale);
    }
    // Together: each close waits out the event loops' quiet period.
    CompletableFuture.allOf(proxy.closeAsync().toCompletableFuture(), directSession.closeAsync().toCompletableFuture())
        .join();
    Runtime.getRuntime().halt(0);
  }

  /** Reads st over and over, one read at a time, until stop. */
  static void keepReading(CqlSession s, PreparedStatement st, AtomicBoolean stop, AtomicReference<Throwable> err,
      AtomicLong count, CountDownLatch done) {
    if (stop.get() || err.get() != null) {
      done.countDown();
      return;
    }
    s.executeAsync(st.bind()).whenComplete((rs, e) -> {
      if (e != null) {
        err.compareAndSet(null, e);
      } else {
        count.incrementAndGet();
      }
      keepReading(s, st, stop, err, count, done);
    });
  }
}
