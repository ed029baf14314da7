// Rally's API reference page: loads the stack's contract, points "Try it
// out" at this stack, marks the service routes a browser cannot sign, and
// mints local player tokens that authorize the page.
"use strict";
(function () {
  const origin = window.location.origin;
  for (const el of document.querySelectorAll(".origin")) {
    el.textContent = origin;
  }
  const main = document.getElementById("swagger-ui");
  const status = document.getElementById("token-status");
  const tokenValue = document.getElementById("token-value");
  const tokenLabel = document.getElementById("token-value-label");
  const methods = ["get", "put", "post", "delete", "patch", "head", "options", "trace"];
  const subInput = document.getElementById("token-sub");
  // /docs?sub=bob opens the page authorized as bob.
  const askedSub = new URLSearchParams(window.location.search).get("sub");
  if (askedSub) {
    subInput.value = askedSub;
  }
  let ui = null;
  let bearerScheme = null;

  function say(text, isError) {
    status.textContent = text;
    status.classList.toggle("rally-error", Boolean(isError));
  }

  // problemText turns an application/problem+json body into one line.
  function problemText(body, code) {
    const parts = [body.detail || body.title || "status " + code];
    for (const e of body.errors || []) {
      parts.push(e.field + " " + e.message);
    }
    return "No token: " + parts.join("; ");
  }

  // "Try it out" goes wherever this page was served from (the document
  // names the stack as localhost, the page may be on 127.0.0.1), never to
  // a deployment, and the service routes say why they cannot be tried here.
  function prepare(spec) {
    spec.servers = [{ url: origin, description: "this local stack" }];
    const schemes = (spec.components && spec.components.securitySchemes) || {};
    bearerScheme = Object.keys(schemes).find(
      (k) => schemes[k].type === "http" && String(schemes[k].scheme).toLowerCase() === "bearer") || null;
    const sigv4 = Object.keys(schemes).filter((k) => schemes[k]["x-amazon-apigateway-authtype"] === "awsSigv4");
    for (const item of Object.values(spec.paths || {})) {
      for (const m of methods) {
        const op = item[m];
        if (!op) continue;
        const security = op.security || spec.security || [];
        if (security.some((req) => Object.keys(req).some((k) => sigv4.includes(k)))) {
          op.description = "**Service route (AWS SigV4).** A browser cannot sign it, so *Try it out* answers 403 here: " +
            "call it with `curl --aws-sigv4` and the local credentials (see the top of the page).\n\n" + (op.description || "");
        }
      }
    }
    return spec;
  }

  fetch("/openapi.json", { headers: { Accept: "application/json" } })
    .then((r) => {
      if (!r.ok) throw new Error("/openapi.json answered " + r.status);
      return r.json();
    })
    .then((spec) => {
      main.textContent = "";
      ui = SwaggerUIBundle({
        spec: prepare(spec),
        domNode: main,
        deepLinking: true,
        persistAuthorization: true,
        validatorUrl: null,
        defaultModelsExpandDepth: 0,
        onComplete: () => {
          main.removeAttribute("aria-busy");
          document.body.dataset.docsReady = "true";
          if (askedSub) {
            mint(askedSub);
          }
        },
      });
    })
    .catch((err) => {
      main.removeAttribute("aria-busy");
      main.textContent = "The API reference could not be loaded: " + err.message;
      document.body.dataset.docsReady = "error";
    });

  // mint gets a token for player sub from the stack and authorizes the
  // page's bearer scheme with it.
  function mint(sub) {
    say("Getting a token for " + sub + "…");
    return fetch("/_local/token", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ sub: sub }),
    })
      .then((r) => r.json().then((body) => ({ r, body }), () => ({ r, body: {} })))
      .then(({ r, body }) => {
        if (!r.ok || !body.token) {
          say(problemText(body, r.status), true);
          return;
        }
        if (!ui || !bearerScheme) {
          say("Token minted, but the reference has not loaded to use it: " + body.token, true);
          return;
        }
        ui.preauthorizeApiKey(bearerScheme, body.token);
        tokenValue.value = body.token;
        tokenValue.hidden = tokenLabel.hidden = false;
        say("Authorized as " + sub + " until " + new Date(body.expires_at).toLocaleString() +
          ": Try it out now sends Authorization: Bearer with this token.");
        document.body.dataset.tokenSub = sub;
      })
      .catch((err) => say("No token: " + err.message, true));
  }

  document.getElementById("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    mint(subInput.value.trim());
  });
})();
