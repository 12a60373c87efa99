// The API reference page: Swagger UI (django-ninja's bundle, served from our static files) draws
// the served OpenAPI document into #swagger-ui. A file of its own: the Content-Security-Policy
// refuses inline scripts.
document.addEventListener("DOMContentLoaded", () => {
  const target = document.getElementById("swagger-ui");
  if (!target || typeof window.SwaggerUIBundle !== "function") {
    return;
  }
  window.SwaggerUIBundle({
    url: target.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    deepLinking: true,
    docExpansion: "list",
    defaultModelsExpandDepth: 0,
  });
});
