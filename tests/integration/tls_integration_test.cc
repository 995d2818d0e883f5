// TLS and mutual TLS on the gRPC port, with certificates made by openssl at test time: the server
// speaks only TLS when given a certificate, the client library, sluice-client and sluice-loadtest
// connect with the CA, and clients without the right CA (or, for mutual TLS, without a
// certificate) are refused while the server keeps serving.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/inference_client.h"
#include "client/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"

namespace sluice {
namespace {

using client::ClientOptions;
using client::InferenceClient;
using client::TlsOptions;
using inference::ModelInferRequest;
using ::testing::HasSubstr;
using testing::ServerProcess;

// A CA, a server certificate for 127.0.0.1/localhost and a client certificate signed by it, and
// a second, unrelated CA; EC P-256 keys, valid for a day.
class Certificates {
 public:
  Certificates() {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("sluice-tls-", getpid());
    std::filesystem::create_directories(dir_);
    const std::string script = absl::StrCat(
        "set -e; cd '", dir_.string(), "'\n",
        "key() { openssl ecparam -name prime256v1 -genkey -noout -out \"$1\"; }\n",
        "key ca.key; key other-ca.key; key server.key; key client.key\n",
        "openssl req -x509 -new -key ca.key -subj /CN=sluice-test-ca -days 1 -out ca.pem\n",
        "openssl req -x509 -new -key other-ca.key -subj /CN=other-ca -days 1 -out other-ca.pem\n",
        "openssl req -new -key server.key -subj /CN=localhost -out server.csr\n",
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > server.ext\n",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 ",
        "-extfile server.ext -out server.pem\n",
        "openssl req -new -key client.key -subj /CN=sluice-test-client -out client.csr\n",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 ",
        "-out client.pem\n");
    const std::string command =
        absl::StrCat("bash -c \"$(cat <<'SCRIPT'\n", script, "SCRIPT\n)\" >/dev/null 2>&1");
    ok_ = std::system(command.c_str()) == 0;
  }
  ~Certificates() { std::filesystem::remove_all(dir_); }
  bool ok() const { return ok_; }
  std::string operator()(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
  bool ok_ = false;
};

ModelInferRequest SimpleRequest() {
  ModelInferRequest request;
  request.set_model_name("simple");
  std::vector<int32_t> a(16, 2), b(16, 3);
  EXPECT_TRUE(client::AddInput(request, "INPUT0", {1, 16}, a).ok());
  EXPECT_TRUE(client::AddInput(request, "INPUT1", {1, 16}, b).ok());
  return request;
}

std::unique_ptr<InferenceClient> Connect(const ServerProcess& server, TlsOptions tls) {
  ClientOptions options;
  options.timeout_ms = 5000;
  options.tls = std::move(tls);
  auto client = InferenceClient::Create(server.address(), options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// Runs a command; its exit code (-1 if it did not exit normally).
int RunCommand(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (RunCommand("command -v openssl >/dev/null") != 0)
      GTEST_SKIP() << "openssl is not installed";
    ASSERT_TRUE(certs_.ok()) << "openssl could not make the test certificates";
  }
  Certificates certs_;
};

TEST_F(TlsTest, ServerWithACertificateSpeaksOnlyTls) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                                      "--tls-cert=" + certs_("server.pem"),
                                      "--tls-key=" + certs_("server.key")});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->Log(), HasSubstr("(TLS)"));

  auto trusted = Connect(**server, TlsOptions{.ca_file = certs_("ca.pem")});
  auto result = trusted->Infer(SimpleRequest());
  ASSERT_TRUE(result.ok()) << result.status();
  auto sum = client::DecodeOutput(*result, "OUTPUT0");
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->As<int32_t>().value_or(std::vector<int32_t>{}), std::vector<int32_t>(16, 5));

  auto plaintext = Connect(**server, TlsOptions{});
  EXPECT_EQ(plaintext->Infer(SimpleRequest()).status().code(), absl::StatusCode::kUnavailable);
  auto wrong_ca = Connect(**server, TlsOptions{.ca_file = certs_("other-ca.pem")});
  EXPECT_EQ(wrong_ca->Infer(SimpleRequest()).status().code(), absl::StatusCode::kUnavailable);
  // A name the certificate does not carry fails verification too.
  auto wrong_name =
      Connect(**server, TlsOptions{.ca_file = certs_("ca.pem"), .server_name = "not-the-server"});
  EXPECT_EQ(wrong_name->Infer(SimpleRequest()).status().code(), absl::StatusCode::kUnavailable);

  EXPECT_TRUE(trusted->Infer(SimpleRequest()).ok());  // still serving
  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

TEST_F(TlsTest, MutualTlsNeedsAClientCertificateFromTheCa) {
  auto server =
      ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                            "--tls-cert=" + certs_("server.pem"),
                            "--tls-key=" + certs_("server.key"), "--tls-ca=" + certs_("ca.pem")});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->Log(), HasSubstr("(mutual TLS)"));

  auto anonymous = Connect(**server, TlsOptions{.ca_file = certs_("ca.pem")});
  EXPECT_EQ(anonymous->Infer(SimpleRequest()).status().code(), absl::StatusCode::kUnavailable);
  auto known = Connect(**server, TlsOptions{.ca_file = certs_("ca.pem"),
                                            .cert_file = certs_("client.pem"),
                                            .key_file = certs_("client.key")});
  EXPECT_TRUE(known->Infer(SimpleRequest()).ok());

  // The command-line tools take the same flags.
  const std::string tls_flags =
      absl::StrCat(" --url=", (*server)->address(), " --tls-ca=", certs_("ca.pem"),
                   " --tls-cert=", certs_("client.pem"), " --tls-key=", certs_("client.key"));
  EXPECT_EQ(RunCommand(absl::StrCat(SLUICE_CLIENT_BINARY, tls_flags, " health >/dev/null")), 0);
  EXPECT_NE(RunCommand(absl::StrCat(SLUICE_CLIENT_BINARY, " --url=", (*server)->address(),
                                    " --timeout-ms=3000 health >/dev/null 2>&1")),
            0);
  EXPECT_EQ(RunCommand(absl::StrCat(SLUICE_LOADTEST_BINARY, tls_flags,
                                    " --model=simple --concurrency=4 --warmup-ms=0 --window-ms=200 "
                                    "--max-windows=1 --no-progress >/dev/null")),
            0);
  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

TEST_F(TlsTest, BadTlsFlagsFailAtStartWithTheReason) {
  auto no_key = ServerProcess::Start({"--tls-cert=" + certs_("server.pem")});
  ASSERT_FALSE(no_key.ok());
  EXPECT_THAT(std::string(no_key.status().message()), HasSubstr("go together"));
  auto missing = ServerProcess::Start(
      {"--tls-cert=/nonexistent/server.pem", "--tls-key=" + certs_("server.key")});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/server.pem"));
  auto not_pem = ServerProcess::Start(
      {"--tls-cert=" + certs_("server.ext"), "--tls-key=" + certs_("server.key")});
  ASSERT_FALSE(not_pem.ok());
  EXPECT_THAT(std::string(not_pem.status().message()), HasSubstr("is not PEM"));

  ClientOptions half;
  half.tls.cert_file = certs_("client.pem");
  EXPECT_EQ(InferenceClient::Create("127.0.0.1:1", half).status().code(),
            absl::StatusCode::kInvalidArgument);
  ClientOptions missing_ca;
  missing_ca.tls.ca_file = "/nonexistent/ca.pem";
  auto created = InferenceClient::Create("127.0.0.1:1", missing_ca);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("/nonexistent/ca.pem"));
}

}  // namespace
}  // namespace sluice
