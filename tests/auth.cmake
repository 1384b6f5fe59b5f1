# auth/: the control plane's TLS plumbing and checks. The TLS cluster
# itself (certificates, roles, protected mode) runs as real processes in
# integration_auth_test.
meshpool_test(auth_test
  SOURCES auth_test.cc
  LIBS meshpool_auth)
