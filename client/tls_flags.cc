#include "client/tls_flags.h"

namespace sluice::client {

void AddTlsFlags(CLI::App& app, TlsOptions& tls) {
  app.add_flag("--tls", tls.enabled,
               "Connect with TLS, verifying the server against the system's CA roots (or "
               "--tls-ca)")
      ->envname("SLUICE_CLIENT_TLS");
  app.add_option("--tls-ca", tls.ca_file,
                 "PEM file of the CA(s) that verify the server (implies --tls)")
      ->envname("SLUICE_CLIENT_TLS_CA");
  app.add_option("--tls-cert", tls.cert_file,
                 "PEM client certificate, for servers that require mutual TLS (implies --tls; "
                 "needs --tls-key)")
      ->envname("SLUICE_CLIENT_TLS_CERT");
  app.add_option("--tls-key", tls.key_file, "PEM private key of --tls-cert")
      ->envname("SLUICE_CLIENT_TLS_KEY");
  app.add_option("--tls-server-name", tls.server_name,
                 "Name to check the server's certificate against instead of the --url host "
                 "(implies --tls)")
      ->envname("SLUICE_CLIENT_TLS_SERVER_NAME");
}

}  // namespace sluice::client
