// Observability end to end: the real sluice-server process scraped by a real Prometheus server
// (Debian's `prometheus`), the Grafana dashboard's queries against /metrics, and a logger flood
// that must never hold a request up.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/inference_client.h"
#include "client/tensor_codec.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/metrics_exporter.h"
#include "tests/integration/server_process.h"
#include "tests/support/http_get.h"

namespace sluice {
namespace {

using client::AddInput;
using client::InferenceClient;
using inference::ModelInferRequest;
using testing::HttpGet;
using testing::HttpResponse;
using testing::SampleValue;
using testing::ServerProcess;

constexpr char kPrometheusBinary[] = "/usr/bin/prometheus";

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// A loopback port nobody listens on right now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t length = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  close(fd);
  return ntohs(addr.sin_port);
}

template <typename Predicate>
bool WaitUntil(std::chrono::seconds timeout, Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

// --- A Prometheus server on loopback, with its own config and data folder ----------------------

class PrometheusProcess {
 public:
  // Starts Prometheus scraping 127.0.0.1:`target_port` every second, and waits until it is ready.
  static absl::StatusOr<std::unique_ptr<PrometheusProcess>> Start(int target_port) {
    std::string pattern = absl::StrCat(::testing::TempDir(), "sluice_prometheus_XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) return absl::InternalError("mkdtemp failed");
    std::unique_ptr<PrometheusProcess> process(new PrometheusProcess(pattern));
    {
      std::ofstream config(process->dir_ + "/prometheus.yml");
      config << "global:\n"
             << "  scrape_interval: 1s\n"
             << "  scrape_timeout: 900ms\n"
             << "  evaluation_interval: 1s\n"
             << "scrape_configs:\n"
             << "  - job_name: sluice\n"
             << "    static_configs:\n"
             << "      - targets: ['127.0.0.1:" << target_port << "']\n";
    }
    // A port picked by bind(0) may be taken before Prometheus binds it: try a few.
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (process->Launch(FreePort())) return process;
    }
    return absl::InternalError(absl::StrCat("Prometheus did not get ready:\n", process->Log()));
  }

  ~PrometheusProcess() {
    Kill();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Runs an instant query; the value of its single result, nullopt for an empty result, or an
  // error (the query failed to parse or evaluate, or Prometheus did not answer).
  absl::StatusOr<std::optional<double>> Query(const std::string& expr) const {
    const HttpResponse response =
        HttpGet(port_, absl::StrCat("/api/v1/query?query=", UrlEncode(expr)));
    if (response.status == 0) return absl::UnavailableError("Prometheus did not answer");
    const nlohmann::json json = nlohmann::json::parse(response.body, nullptr, false);
    if (json.is_discarded() || json.value("status", "") != "success") {
      return absl::InvalidArgumentError(absl::StrCat("query '", expr, "': ", response.body));
    }
    const nlohmann::json& result = json["data"]["result"];
    if (json["data"]["resultType"] == "scalar") {
      return std::optional<double>(std::stod(result[1].get<std::string>()));
    }
    if (result.empty()) return std::optional<double>();
    if (result.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("query '", expr, "' returned ", result.size(), " series"));
    }
    return std::optional<double>(std::stod(result[0]["value"][1].get<std::string>()));
  }

  // OK if Prometheus parses and evaluates `expr` (whatever it returns).
  absl::Status Evaluates(const std::string& expr) const {
    const HttpResponse response =
        HttpGet(port_, absl::StrCat("/api/v1/query?query=", UrlEncode(expr)));
    const nlohmann::json json = nlohmann::json::parse(response.body, nullptr, false);
    if (response.status == 200 && !json.is_discarded() && json.value("status", "") == "success") {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("query '", expr, "': HTTP ", response.status, " ", response.body));
  }

  // The value of `expr` once it is present, nullopt while it is not (errors count as absent).
  std::optional<double> Value(const std::string& expr) const {
    absl::StatusOr<std::optional<double>> value = Query(expr);
    return value.ok() ? *value : std::nullopt;
  }

  std::string Log() const {
    std::ifstream in(dir_ + "/prometheus.log");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  explicit PrometheusProcess(std::string dir) : dir_(std::move(dir)) {}

  bool Launch(int port) {
    port_ = port;
    std::vector<std::string> argv = {
        kPrometheusBinary, absl::StrCat("--config.file=", dir_, "/prometheus.yml"),
        absl::StrCat("--storage.tsdb.path=", dir_, "/data"),
        absl::StrCat("--web.listen-address=127.0.0.1:", port), "--log.level=warn"};
    std::vector<char*> c_argv;
    for (std::string& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    const std::string log_path = dir_ + "/prometheus.log";
    pid_ = fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
      }
      execv(c_argv[0], c_argv.data());
      _exit(127);
    }
    const bool ready = WaitUntil(std::chrono::seconds(30), [&] {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return true;  // exited: stop waiting
      }
      return HttpGet(port_, "/-/ready").status == 200;
    });
    if (!ready || pid_ < 0) {
      Kill();
      return false;
    }
    return true;
  }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    const bool exited =
        WaitUntil(std::chrono::seconds(5), [&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; });
    if (!exited) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }

  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// --- Requests -----------------------------------------------------------------------------------

ModelInferRequest SimpleRequest(int batch = 1, const std::string& id = "") {
  ModelInferRequest request;
  request.set_model_name("simple");
  request.set_id(id);
  std::vector<int32_t> values(16 * batch, 1);
  EXPECT_TRUE(AddInput(request, "INPUT0", {batch, 16}, values).ok());
  EXPECT_TRUE(AddInput(request, "INPUT1", {batch, 16}, values).ok());
  return request;
}

std::unique_ptr<InferenceClient> Connect(const ServerProcess& server) {
  auto client = InferenceClient::Create(server.address());
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// --- PromQL: the metric names an expression reads ----------------------------------------------

// Metric names in a PromQL expression: identifiers that are not functions, aggregations,
// keywords, label names (inside {} or by/without/on/ignoring lists), ranges or Grafana variables.
std::set<std::string> MetricNames(std::string expr) {
  static const std::regex braces(R"(\{[^}]*\})");
  static const std::regex ranges(R"(\[[^\]]*\])");
  static const std::regex grouping(
      R"(\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\))");
  static const std::regex identifier(R"([A-Za-z_:][A-Za-z0-9_:]*)");
  static const std::set<std::string> keywords = {"and", "or",  "unless", "bool", "offset",
                                                 "by",  "inf", "nan",    "Inf",  "NaN"};
  expr = std::regex_replace(expr, braces, " ");
  expr = std::regex_replace(expr, ranges, " ");
  expr = std::regex_replace(expr, grouping, " ");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), identifier);
       it != std::sregex_iterator(); ++it) {
    const size_t begin = static_cast<size_t>(it->position());
    const size_t end = begin + static_cast<size_t>(it->length());
    if (begin > 0 &&
        (expr[begin - 1] == '$' || std::isdigit(expr[begin - 1]) || expr[begin - 1] == '.')) {
      continue;  // a Grafana variable, or the exponent of a number
    }
    size_t next = end;
    while (next < expr.size() && std::isspace(expr[next])) ++next;
    if (next < expr.size() && expr[next] == '(') continue;  // function or aggregation
    const std::string name = it->str();
    if (keywords.count(name) > 0) continue;
    names.insert(name);
  }
  return names;
}

TEST(MetricsPromqlTest, ExtractsMetricNames) {
  EXPECT_EQ(MetricNames(R"(histogram_quantile(0.99, sum by (le, model) )"
                        R"((rate(sluice_request_duration_seconds_bucket{model=~"$model"})"
                        R"([$__rate_interval]))))"),
            std::set<std::string>{"sluice_request_duration_seconds_bucket"});
  EXPECT_EQ(MetricNames("sum(rate(a_total[1m])) by (x) / on (y) sum(b)"),
            (std::set<std::string>{"a_total", "b"}));
  EXPECT_EQ(MetricNames("1e3 * c and d offset 5m"), (std::set<std::string>{"c", "d"}));
}

// Every PromQL expression of the dashboard: panel targets (rows included) and template queries
// (label_values(metric, label) -> metric).
std::vector<std::string> DashboardExpressions(const nlohmann::json& dashboard) {
  std::vector<std::string> exprs;
  std::function<void(const nlohmann::json&)> panels = [&](const nlohmann::json& list) {
    for (const nlohmann::json& panel : list) {
      if (panel.contains("targets")) {
        for (const nlohmann::json& target : panel["targets"]) {
          if (target.contains("expr")) exprs.push_back(target["expr"].get<std::string>());
        }
      }
      if (panel.contains("panels")) panels(panel["panels"]);
    }
  };
  panels(dashboard["panels"]);
  static const std::regex label_values(R"(label_values\(\s*([^,]+),)");
  for (const nlohmann::json& variable : dashboard["templating"]["list"]) {
    if (variable.value("type", "") != "query") continue;
    const std::string query = variable["query"].is_object()
                                  ? variable["query"]["query"].get<std::string>()
                                  : variable["query"].get<std::string>();
    std::smatch match;
    if (std::regex_search(query, match, label_values)) exprs.push_back(match[1]);
  }
  return exprs;
}

nlohmann::json LoadDashboard() {
  const std::string text = ReadFile(SLUICE_SOURCE_DIR "/deploy/grafana/sluice-dashboard.json");
  nlohmann::json dashboard = nlohmann::json::parse(text, nullptr, false);
  EXPECT_FALSE(dashboard.is_discarded()) << "deploy/grafana/sluice-dashboard.json is not JSON";
  return dashboard;
}

// Grafana's variables replaced so that Prometheus can evaluate an expression.
std::string Instantiate(std::string expr) {
  for (const auto& [variable, value] : std::vector<std::pair<std::string, std::string>>{
           {"$__rate_interval", "15s"}, {"$job", ".+"}, {"$model", ".+"}}) {
    for (size_t pos = expr.find(variable); pos != std::string::npos;
         pos = expr.find(variable, pos + value.size())) {
      expr.replace(pos, variable.size(), value);
    }
  }
  return expr;
}

// --- Tests --------------------------------------------------------------------------------------

// The acceptance test: N requests through the client, Prometheus scraping the server, and the
// Prometheus HTTP API answering exactly N, a filled histogram, and a positive throughput gauge
// while the load ran.
TEST(MetricsIntegrationTest, PrometheusSeesExactlyTheRequestsSent) {
  if (access(kPrometheusBinary, X_OK) != 0) {
    GTEST_SKIP() << kPrometheusBinary
                 << " is absent: install Debian's `prometheus` (scripts/bootstrap.sh does)";
  }
  auto server = ServerProcess::Start({"--metrics-interval-ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->metrics_port(), 0) << (*server)->Log();
  auto prometheus = PrometheusProcess::Start((*server)->metrics_port());
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  const PrometheusProcess& prom = **prometheus;
  ASSERT_TRUE(
      WaitUntil(std::chrono::seconds(15), [&] { return prom.Value(R"(up{job="sluice"})") == 1.0; }))
      << "Prometheus never scraped the server:\n"
      << prom.Log();

  // Load until Prometheus has seen a positive throughput gauge (the collector runs every
  // 200 ms, Prometheus scrapes every second).
  std::atomic<bool> stop{false};
  std::atomic<int64_t> succeeded{0}, failed{0};
  std::thread load([&] {
    auto client = Connect(**server);
    const ModelInferRequest request = SimpleRequest();
    while (!stop.load()) {
      (client->Infer(request).ok() ? succeeded : failed).fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  double throughput_seen = 0;
  WaitUntil(std::chrono::seconds(20), [&] {
    throughput_seen =
        prom.Value(R"(sum(sluice_throughput_items_per_second{model="simple"}))").value_or(0);
    return throughput_seen > 0;
  });
  stop = true;
  load.join();
  EXPECT_GT(throughput_seen, 0) << "the throughput gauge never rose while load ran";
  const int64_t n = succeeded.load();
  ASSERT_EQ(failed.load(), 0);
  ASSERT_GT(n, 0);

  // Exactly N, once a scrape after the last request has landed.
  const std::string success_expr =
      R"(sum(sluice_inference_requests_total{outcome="success",model="simple"}))";
  std::optional<double> seen;
  WaitUntil(std::chrono::seconds(10), [&] {
    seen = prom.Value(success_expr);
    return seen == static_cast<double>(n);
  });
  ASSERT_TRUE(seen.has_value()) << success_expr << " is empty";
  EXPECT_EQ(*seen, static_cast<double>(n));
  EXPECT_EQ(prom.Value(R"(sum(sluice_inference_items_total{model="simple"}))"),
            static_cast<double>(n));
  EXPECT_EQ(prom.Value(R"(sum(sluice_inference_requests_total{outcome="failure",model="simple"}))"),
            0.0);

  // The request-duration histogram: N observations over 19 buckets (18 bounds and +Inf), and a
  // quantile Prometheus can compute from them.
  EXPECT_EQ(prom.Value(R"(sum(sluice_request_duration_seconds_count{model="simple"}))"),
            static_cast<double>(n));
  EXPECT_EQ(prom.Value(R"(count(sluice_request_duration_seconds_bucket{model="simple"}))"), 19.0);
  EXPECT_EQ(prom.Value(R"(sum(sluice_request_duration_seconds_bucket{model="simple",le="+Inf"}))"),
            static_cast<double>(n));
  const std::optional<double> median = prom.Value(
      R"(histogram_quantile(0.5, sum by (le) (sluice_request_duration_seconds_bucket{model="simple"})))");
  ASSERT_TRUE(median.has_value());
  EXPECT_GT(*median, 0);
  EXPECT_LT(*median, 1.0);
  EXPECT_GT(prom.Value(R"(sum(sluice_batch_size_count{model="simple"}))").value_or(0), 0);
  EXPECT_EQ(prom.Value(R"(sum(sluice_device_items_total{model="simple"}))"),
            static_cast<double>(n));

  // Every dashboard expression parses and evaluates in this Prometheus.
  for (const std::string& expr : DashboardExpressions(LoadDashboard())) {
    EXPECT_TRUE(prom.Evaluates(Instantiate(expr)).ok()) << prom.Evaluates(Instantiate(expr));
  }
}

// Every metric the Grafana dashboard queries is in /metrics (after a few requests, so that every
// series exists); the GPU gauges, which only a server with NVML has, must be names the exporter
// produces when it has a GPU source.
TEST(MetricsIntegrationTest, DashboardQueriesOnlyExportedMetrics) {
  const nlohmann::json dashboard = LoadDashboard();
  ASSERT_FALSE(dashboard.is_discarded());
  auto server = ServerProcess::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client->Infer(SimpleRequest()).ok());
  ModelInferRequest bad = SimpleRequest();
  bad.mutable_inputs(0)->set_datatype("FP32");
  EXPECT_FALSE(client->Infer(bad).ok());
  const HttpResponse metrics = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_EQ(metrics.status, 200);

  server::MetricsInput with_gpu;
  with_gpu.gpus = std::vector<server::GpuSample>{{.index = 0, .uuid = "GPU-test"}};
  const std::string gpu_exposition = server::SerializeText(server::BuildMetricFamilies(with_gpu));

  std::set<std::string> names;
  for (const std::string& expr : DashboardExpressions(dashboard)) {
    for (const std::string& name : MetricNames(expr)) names.insert(name);
  }
  EXPECT_GE(names.size(), 14u) << "the dashboard lost panels, or the extractor broke";
  for (const std::string& name : names) {
    const std::regex series("(^|\n)" + name + "[{ ]");
    if (name.rfind("sluice_gpu_", 0) == 0) {
      EXPECT_TRUE(std::regex_search(gpu_exposition, series))
          << "dashboard queries " << name << ", which the exporter never produces";
      EXPECT_FALSE(std::regex_search(metrics.body, series))
          << name << " exported without NVML: made-up values";
      continue;
    }
#if defined(SLUICE_SANITIZER_BUILD)
    // A sanitizer build's allocator replaces malloc and has no heap account to export
    // (ReadHeapSample); the exporter's own test checks the family's text.
    if (name.rfind("sluice_heap_", 0) == 0) continue;
#endif
    EXPECT_TRUE(std::regex_search(metrics.body, series))
        << "dashboard queries " << name << ", absent from /metrics:\n"
        << metrics.body;
  }
  // The requests above, exactly.
  const std::string m = R"(model="simple",version="1")";
  EXPECT_EQ(
      SampleValue(metrics.body, "sluice_inference_requests_total{" + m + R"(,outcome="success"})"),
      3.0);
  EXPECT_EQ(SampleValue(metrics.body, "sluice_inference_requests_total{" + m +
                                          R"(,outcome="failure",reason="invalid_argument"})"),
            1.0);
}

TEST(MetricsIntegrationTest, MetricsCanBeTurnedOff) {
  auto server = ServerProcess::Start({"--allow-metrics=false"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->metrics_port(), 0);
  EXPECT_NE((*server)->Log().find("metrics disabled"), std::string::npos) << (*server)->Log();
  auto client = Connect(**server);
  EXPECT_TRUE(client->Infer(SimpleRequest()).ok());
}

// A logger with a one-record queue, and an access-log record for every request: requests never
// wait for the log (all answered, none late), and the drop counter is exactly the records lost:
// access lines written + sluice_log_dropped_total (during the flood) = requests.
TEST(MetricsIntegrationTest, LoggerFloodNeverBlocksAndCountsEveryDrop) {
  auto server = ServerProcess::Start(
      {"--log-queue-capacity=1", "--access-log-sample-rate=1", "--log-level=info"});
  ASSERT_TRUE(server.ok()) << server.status();
  const int metrics_port = (*server)->metrics_port();
  auto dropped = [&]() -> double {
    return SampleValue(HttpGet(metrics_port, "/metrics").body, "sluice_log_dropped_total")
        .value_or(-1);
  };
  const double dropped_before = dropped();
  ASSERT_GE(dropped_before, 0);

  constexpr int kThreads = 8;
  constexpr int kPerThread = 250;
  std::atomic<int> ok{0}, errors{0};
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      client::ClientOptions options;
      options.timeout_ms = 10'000;
      auto client = InferenceClient::Create((*server)->address(), options);
      if (!client.ok()) {
        errors += kPerThread;
        return;
      }
      for (int i = 0; i < kPerThread; ++i) {
        const bool answered =
            (*client)->Infer(SimpleRequest(1 + i % 2, absl::StrCat("t", t, "-", i))).ok();
        (answered ? ok : errors).fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  constexpr int kRequests = kThreads * kPerThread;
  EXPECT_EQ(ok.load(), kRequests);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LT(elapsed, std::chrono::seconds(30));

  // Every access record was offered before its answer went out, so the drop count is final.
  const double dropped_in_flood = dropped() - dropped_before;
  EXPECT_GT(dropped_in_flood, 0) << "a one-record queue should overflow under this flood";
  auto access_lines = [&] {
    const std::string log = (*server)->Log();
    size_t n = 0;
    for (size_t pos = log.find(" I access "); pos != std::string::npos;
         pos = log.find(" I access ", pos + 1)) {
      ++n;
    }
    return static_cast<double>(n);
  };
  // The writer thread may still be writing the last lines.
  double written = 0;
  WaitUntil(std::chrono::seconds(10), [&] {
    written = access_lines();
    return written + dropped_in_flood == kRequests;
  });
  EXPECT_EQ(written + dropped_in_flood, static_cast<double>(kRequests))
      << "written " << written << ", dropped " << dropped_in_flood;
  EXPECT_EQ(dropped(), dropped_before + dropped_in_flood) << "nothing logs between floods";
}

}  // namespace
}  // namespace sluice
