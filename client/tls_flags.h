#pragma once

// The TLS flags shared by sluice-client and sluice-loadtest, so both take the same names.

#include "CLI/CLI.hpp"
#include "client/inference_client.h"

namespace sluice::client {

// Adds --tls, --tls-ca, --tls-cert, --tls-key and --tls-server-name (with SLUICE_TLS_*
// environment variables, SLUICE_CLIENT_TLS_* so that they never mix with the server's SLUICE_TLS_*)
// filling `tls`, which must outlive parsing. Any file implies --tls.
void AddTlsFlags(CLI::App& app, TlsOptions& tls);

}  // namespace sluice::client
