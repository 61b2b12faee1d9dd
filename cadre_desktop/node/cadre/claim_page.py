"""The page a phone opens after scanning a node's QR code (``GET /claim``).

Self-contained (inline CSS and script, nothing fetched from elsewhere) because the
phone may have no internet, only the home network. The claim secret travels in the
URL fragment, which a browser never sends to a server, so it appears in no log; the
script reads it from ``location.hash`` and posts it with the cadre name to
``POST /claim``. Results are told in plain words.
"""

from __future__ import annotations

import re
import secrets

_PLACEHOLDER = re.compile(r"__(NONCE|NODE_ID|NODE_LABEL|REQUESTED)__")

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Claim __NODE_LABEL__</title>
<style nonce="__NONCE__">
  :root { color-scheme: light dark; --accent: #2f6fde; --ok: #1b7f3b; --bad: #b3261e; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 17px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
         display: flex; justify-content: center; padding: 24px 16px; }
  main { width: 100%; max-width: 420px; }
  h1 { font-size: 1.4em; margin: 0 0 4px; }
  .node { opacity: .75; margin: 0 0 20px; word-break: break-all; }
  label { display: block; font-weight: 600; margin-bottom: 6px; }
  input { width: 100%; font: inherit; padding: 12px; border-radius: 10px;
          border: 1px solid #8889; background: transparent; color: inherit; }
  button { width: 100%; margin-top: 14px; font: inherit; font-weight: 600; padding: 12px;
           border: 0; border-radius: 10px; background: var(--accent); color: #fff; }
  button:disabled { opacity: .5; }
  #result { margin-top: 20px; padding: 14px; border-radius: 10px; display: none; }
  #result.ok { display: block; border: 2px solid var(--ok); }
  #result.bad { display: block; border: 2px solid var(--bad); }
  #result.info { display: block; border: 1px solid #8889; }
  details { margin-top: 10px; font-size: .9em; }
  code { word-break: break-all; }
</style>
</head>
<body>
<main id="app" data-node-id="__NODE_ID__" data-requested-node="__REQUESTED__">
  <h1>Claim this cadre node</h1>
  <p class="node"><strong>__NODE_LABEL__</strong></p>
  <form id="claim-form" autocomplete="on">
    <label for="cadre">Your cadre's name</label>
    <input id="cadre" name="cadre" maxlength="64" required autocapitalize="none"
           autocorrect="off" spellcheck="false" placeholder="e.g. family">
    <button id="submit" type="submit">Claim node</button>
  </form>
  <div id="result" role="status" aria-live="polite"></div>
</main>
<script nonce="__NONCE__">
(function () {
  "use strict";
  var app = document.getElementById("app");
  var form = document.getElementById("claim-form");
  var input = document.getElementById("cadre");
  var button = document.getElementById("submit");
  var result = document.getElementById("result");
  var STORE_KEY = "cadre.lastCadreName";
  var secret = "";
  try { secret = decodeURIComponent(location.hash.replace(/^#/, "")); } catch (e) {}

  function show(kind, text, extra) {
    result.className = kind;
    result.textContent = text;
    if (extra) { result.appendChild(extra); }
  }

  try { input.value = localStorage.getItem(STORE_KEY) || ""; } catch (e) {}

  var requested = app.getAttribute("data-requested-node");
  if (requested && requested !== app.getAttribute("data-node-id")) {
    show("info", "This QR code was made for node " + requested +
         ", but this address now serves node " + app.getAttribute("data-node-id") + ".");
  }
  if (!secret) {
    button.disabled = true;
    show("bad", "This link has no claim code in it. Scan the QR code shown on the " +
         "computer again, with the phone's camera.");
    return;
  }

  function tokenBox(token) {
    var box = document.createElement("details");
    var summary = document.createElement("summary");
    summary.textContent = "Owner token (shown only once; keep it to invite other nodes)";
    var code = document.createElement("code");
    code.textContent = token;
    box.appendChild(summary);
    box.appendChild(code);
    return box;
  }

  function explain(status, body) {
    var error = (body && body.error) || {};
    if (status === 200) {
      show("ok", "Claimed into " + body.cadre + ". This node now belongs to your cadre; " +
           "you can close this page.", tokenBox(body.owner_token));
      button.disabled = true;
    } else if (status === 403) {
      show("bad", "That claim code is wrong or has expired. Scan the QR code shown on " +
           "the computer again.");
    } else if (status === 409 && error.code === "already-claimed") {
      show("bad", "This node is already claimed by another cadre. " +
           (error.message || ""));
    } else if (status === 409) {
      show("bad", error.message || "This node cannot be claimed.");
    } else if (status === 429) {
      show("bad", "Too many tries. Wait a minute, then try again.");
    } else if (status === 400) {
      show("bad", "That cadre name was not accepted: " + (error.message || "check it."));
    } else {
      show("bad", "Something went wrong on the node (" + status + "). Try again shortly.");
    }
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var cadre = input.value.trim();
    if (!cadre) { show("bad", "Type your cadre's name first."); return; }
    try { localStorage.setItem(STORE_KEY, cadre); } catch (e) {}
    button.disabled = true;
    show("info", "Claiming\\u2026");
    fetch("/claim", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ secret: secret, cadre: cadre }),
      cache: "no-store",
      referrerPolicy: "no-referrer"
    }).then(function (response) {
      return response.json().catch(function () { return null; }).then(function (body) {
        button.disabled = false;
        explain(response.status, body);
      });
    }).catch(function () {
      button.disabled = false;
      show("bad", "Could not reach the node. Check that this phone is on the same " +
           "network as the computer, then try again.");
    });
  });
})();
</script>
</body>
</html>
"""


def render_claim_page(node_id: str, requested_node: str | None,
                      node_name: str | None = None) -> tuple[str, str]:
    """The page for this node (named as its person named it, else by its id), and the
    nonce its Content-Security-Policy must name."""
    import html  # here, not at the top: a node that is never asked for its page never loads it

    nonce = secrets.token_urlsafe(16)
    values = {
        "NONCE": nonce,
        "NODE_ID": html.escape(node_id),
        "NODE_LABEL": html.escape(node_name or f"Node {node_id}"),
        "REQUESTED": html.escape((requested_node or "")[:128]),
    }
    # One pass, so a value can never be mistaken for a placeholder.
    page = _PLACEHOLDER.sub(lambda m: values[m.group(1)], _PAGE)
    return page, nonce


def content_security_policy(nonce: str) -> str:
    return (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    )
