package cqlguard.drivertest;

import com.datastax.oss.driver.api.core.ConsistencyLevel;
import com.datastax.oss.driver.api.core.context.DriverContext;
import com.datastax.oss.driver.api.core.retry.RetryDecision;
import com.datastax.oss.driver.api.core.retry.RetryPolicy;
import com.datastax.oss.driver.api.core.servererrors.CoordinatorException;
import com.datastax.oss.driver.api.core.servererrors.WriteType;
import com.datastax.oss.driver.api.core.session.Request;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A retry policy that records each decision the driver asks it for and
 * never retries. The driver creates it by name from the configuration
 * (advanced.retry-policy.class), hence the static record.
 */
public final class RecordingRetryPolicy implements RetryPolicy {
  /** The decisions asked for, in order, over every instance. */
  static final List<String> DECISIONS = new CopyOnWriteArrayList<>();

  public RecordingRetryPolicy(DriverContext context, String profileName) {}

  private static RetryDecision record(String kind, Object detail) {
    DECISIONS.add(kind + ": " + detail);
    return RetryDecision.RETHROW;
  }

  @Override
  public RetryDecision onReadTimeout(
      Request request, ConsistencyLevel cl, int blockFor, int received, boolean dataPresent, int retryCount) {
    return record("read_timeout", cl);
  }

  @Override
  public RetryDecision onWriteTimeout(
      Request request, ConsistencyLevel cl, WriteType writeType, int blockFor, int received, int retryCount) {
    return record("write_timeout", writeType);
  }

  @Override
  public RetryDecision onUnavailable(
      Request request, ConsistencyLevel cl, int required, int alive, int retryCount) {
    return record("unavailable", cl);
  }

  @Override
  public RetryDecision onRequestAborted(Request request, Throwable error, int retryCount) {
    return record("request_aborted", error);
  }

  @Override
  public RetryDecision onErrorResponse(Request request, CoordinatorException error, int retryCount) {
    return record("error_response", error);
  }

  @Override
  public void close() {}
}
