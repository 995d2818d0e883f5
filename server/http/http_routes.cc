// The route table: every HTTP route sluice serves, one line each. The handlers live in their API's
// file (kserve_routes.cc, openai_routes.cc); RouteTable (route_table.h) matches paths, answers
// 404/405/400 and gives each API's errors its own shape.

#include "server/http/http_routes.h"

#include <utility>

#include "common/check.h"
#include "server/infer_conversion.h"

namespace sluice::server::http {

HttpRoutes::HttpRoutes(engine::Engine* engine, ModelRepository* repository,
                       HttpRoutesOptions options)
    : engine_(engine),
      repository_(repository),
      options_(std::move(options)),
      table_(KServeErrorResponse) {
  CHECK(options_.serving != nullptr);  // HttpRoutesOptions::serving is required
  using P = const RouteParams&;
  using R = HttpRequest&&;
  // Adapters from a route's captures to the handlers' arguments.
  auto model = [this](std::string action, std::string name_suffix = "") -> RouteHandler {
    return [this, action, name_suffix](P p, R request, Responder respond) {
      Model(p.Get("model") + name_suffix, p.Get("version"), action, request, std::move(respond));
    };
  };
  auto repository_action = [this](std::string action) -> RouteHandler {
    return [this, action](P p, R request, Responder respond) {
      Repository(action == "index" ? "" : p.Get("model"), action, request, std::move(respond));
    };
  };
  auto shared_memory = [this](bool cuda, std::string action) -> RouteHandler {
    return [this, cuda, action](P p, R request, Responder respond) {
      SharedMemory(cuda, p.Get("region"), action, request, std::move(respond));
    };
  };
  auto method = [this](void (HttpRoutes::*handler)(P, R, Responder)) -> RouteHandler {
    return [this, handler](P p, R request, Responder respond) {
      (this->*handler)(p, std::move(request), std::move(respond));
    };
  };

  // KServe v2 HTTP/REST and Triton's extensions (kserve_routes.cc).
  table_.AddApi("/v2", KServeErrorResponse);
  table_.Add("GET", "/v2", method(&HttpRoutes::ServerMetadata));
  table_.Add("GET", "/v2/health/live", method(&HttpRoutes::Live));
  table_.Add("GET", "/v2/health/ready", method(&HttpRoutes::Ready));
  table_.Add("POST", "/v2/repository/index", repository_action("index"));
  table_.Add("POST", "/v2/repository/models/{model}/load", repository_action("load"));
  table_.Add("POST", "/v2/repository/models/{model}/unload", repository_action("unload"));
  table_.Add("GET", "/v2/models/stats", [this](P, R request, Responder respond) {
    Model("", "", "stats", request, std::move(respond));  // every model's, Triton's form
  });
  table_.Add("GET", "/v2/models/{model}[/versions/{version}]", model(""));
  table_.Add("GET", "/v2/models/{model}[/versions/{version}]/ready", model("ready"));
  table_.Add("GET", "/v2/models/{model}[/versions/{version}]/config", model("config"));
  table_.Add("GET", "/v2/models/{model}[/versions/{version}]/stats", model("stats"));
  // A model's tokenizer has statistics of its own, `<model>/tokenizer`; clients put the name in
  // the path unescaped (tritonclient's quote() keeps '/'), so its '/' arrives as a separator.
  table_.Add("GET", "/v2/models/{model}/tokenizer[/versions/{version}]/stats",
             model("stats", std::string(kTokenizerStatsSuffix)));
  table_.Add("POST", "/v2/models/{model}[/versions/{version}]/infer",
             [this](P p, R request, Responder respond) {
               Infer(p.Get("model"), p.Get("version"), std::move(request), std::move(respond));
             });
  table_.Add("GET", "/v2/systemsharedmemory[/region/{region}]/status",
             shared_memory(false, "status"));
  table_.Add("POST", "/v2/systemsharedmemory/region/{region}/register",
             shared_memory(false, "register"));
  table_.Add("POST", "/v2/systemsharedmemory[/region/{region}]/unregister",
             shared_memory(false, "unregister"));
  table_.Add("GET", "/v2/cudasharedmemory[/region/{region}]/status", shared_memory(true, "status"));
  table_.Add("POST", "/v2/cudasharedmemory/region/{region}/register",
             shared_memory(true, "register"));
  table_.Add("POST", "/v2/cudasharedmemory[/region/{region}]/unregister",
             shared_memory(true, "unregister"));

  // OpenAI's embeddings API (openai_routes.cc).
  table_.AddApi("/v1", OpenAiErrorResponse);
  table_.Add("POST", "/v1/embeddings", [this](P, R request, Responder respond) {
    Embeddings(std::move(request), std::move(respond));
  });
  table_.Add("GET", "/v1/models[/{model}]", [this](P p, R, Responder respond) {
    OpenAiModels(p.Get("model"), std::move(respond));
  });

  // Cohere's and Jina's rerank (cohere_routes.cc); their paths sit under /v1 and /v2.
  table_.AddApi("/v1/rerank", CohereErrorResponse);
  table_.AddApi("/v2/rerank", CohereErrorResponse);
  table_.Add("POST", "/v1/rerank", [this](P, R request, Responder respond) {
    CohereRerank(1, std::move(request), std::move(respond));
  });
  table_.Add("POST", "/v2/rerank", [this](P, R request, Responder respond) {
    CohereRerank(2, std::move(request), std::move(respond));
  });

  // Hugging Face TEI (tei_routes.cc), at the root as TEI serves them.
  for (const char* prefix : {"/embed", "/rerank", "/predict", "/tokenize", "/info", "/health"}) {
    table_.AddApi(prefix, TeiErrorResponse);
  }
  table_.Add("POST", "/embed", [this](P, R request, Responder respond) {
    TeiEmbed(std::move(request), std::move(respond));
  });
  table_.Add("POST", "/rerank", [this](P, R request, Responder respond) {
    TeiRerank(std::move(request), std::move(respond));
  });
  table_.Add("POST", "/predict", [this](P, R request, Responder respond) {
    TeiPredict(std::move(request), std::move(respond));
  });
  table_.Add("POST", "/tokenize", [this](P, R request, Responder respond) {
    TeiTokenize(std::move(request), std::move(respond));
  });
  table_.Add("GET", "/info[/{model}]",
             [this](P p, R, Responder respond) { TeiInfo(p.Get("model"), std::move(respond)); });
  table_.Add("GET", "/health", [this](P, R, Responder respond) { TeiHealth(std::move(respond)); });
  table_.Add("POST", "/", [this](P, R request, Responder respond) {
    TeiRoot(std::move(request), std::move(respond));  // TEI: /embed or /predict by the model
  });
}

void HttpRoutes::Handle(HttpRequest&& request, Responder respond) {
  table_.Dispatch(std::move(request), std::move(respond));
}

std::string HttpRoutes::ErrorBody(absl::string_view target, int status,
                                  absl::string_view message) const {
  return table_.ErrorBody(target, status, message);
}

}  // namespace sluice::server::http
