// Starts Swagger UI in the page's #swagger-ui element, on the OpenAPI document its
// data-openapi-url names. A file rather than an inline script, so that the page's
// Content-Security-Policy can refuse inline scripts.
(function () {
  "use strict";
  var element = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: element.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
})();
