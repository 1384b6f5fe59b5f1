# metrics/: the Prometheus text format and the HTTP server on 127.0.0.1.
meshpool_test(metrics_test
  SOURCES metrics_test.cc
  LIBS meshpool_metrics)
