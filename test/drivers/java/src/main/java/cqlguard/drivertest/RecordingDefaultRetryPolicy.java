package cqlguard.drivertest;

import com.datastax.oss.driver.api.core.ConsistencyLevel;
import com.datastax.oss.driver.api.core.context.DriverContext;
import com.datastax.oss.driver.api.core.retry.RetryDecision;
import com.datastax.oss.driver.api.core.retry.RetryPolicy;
import com.datastax.oss.driver.api.core.servererrors.CoordinatorException;
import com.datastax.oss.driver.api.core.servererrors.WriteType;
import com.datastax.oss.driver.api.core.session.Request;
import com.datastax.oss.driver.internal.core.retry.DefaultRetryPolicy;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * The driver's default retry policy, recording each decision the driver asks
 * it for and what it decided: a run with it retries exactly as the driver
 * does out of the box. The driver creates it by name from the configuration
 * (advanced.retry-policy.class), hence the static record.
 */
public final class RecordingDefaultRetryPolicy implements RetryPolicy {
  /** The decisions made, in order, over every instance. */
  static final List<RetryDecision> DECISIONS = new CopyOnWriteArrayList<>();

  private final DefaultRetryPolicy delegate;

  public RecordingDefaultRetryPolicy(DriverContext context, String profileName) {
    delegate = new DefaultRetryPolicy(context, profileName);
  }

  private static RetryDecision record(RetryDecision d) {
    DECISIONS.add(d);
    return d;
  }

  /** Returns how many of the decisions were to retry. */
  static long retries() {
    return DECISIONS.stream().filter(d -> d == RetryDecision.RETRY_SAME || d == RetryDecision.RETRY_NEXT).count();
  }

  @Override
  @Deprecated
  public RetryDecision onReadTimeout(
      Request request, ConsistencyLevel cl, int blockFor, int received, boolean dataPresent, int retryCount) {
    return record(delegate.onReadTimeout(request, cl, blockFor, received, dataPresent, retryCount));
  }

  @Override
  @Deprecated
  public RetryDecision onWriteTimeout(
      Request request, ConsistencyLevel cl, WriteType writeType, int blockFor, int received, int retryCount) {
    return record(delegate.onWriteTimeout(request, cl, writeType, blockFor, received, retryCount));
  }

  @Override
  @Deprecated
  public RetryDecision onUnavailable(
      Request request, ConsistencyLevel cl, int required, int alive, int retryCount) {
    return record(delegate.onUnavailable(request, cl, required, alive, retryCount));
  }

  @Override
  @Deprecated
  public RetryDecision onRequestAborted(Request request, Throwable error, int retryCount) {
    return record(delegate.onRequestAborted(request, error, retryCount));
  }

  @Override
  @Deprecated
  public RetryDecision onErrorResponse(Request request, CoordinatorException error, int retryCount) {
    return record(delegate.onErrorResponse(request, error, retryCount));
  }

  @Override
  public void close() {
    delegate.close();
  }
}
