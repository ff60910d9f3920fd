// The playground page: reads the form, calls the server's /playground endpoints, and shows what they answer.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const INTENTS = {
    off: { reasoning_effort: "none" },
    on: { thinking: { type: "enabled" } },
    low: { reasoning_effort: "low" },
    medium: { reasoning_effort: "medium" },
    high: { reasoning_effort: "high" },
  };

  class Refused extends Error {}

  function element(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function json(value) {
    return JSON.stringify(value, null, 2);
  }

  // A text box's JSON, or an error naming the box.
  function parsed(id, label) {
    const text = $(id).value.trim();
    try {
      return JSON.parse(text);
    } catch (error) {
      throw new Refused(`${label}: not valid JSON (${error.message})`);
    }
  }

  function template() {
    const source = document.querySelector('input[name="source"]:checked');
    const kind = source ? source.value : "text";
    if (kind === "served") return { served: true };
    if (kind === "path") return { path: $("file").value };
    if (!$("template-text").value) throw new Refused("Paste a template, or pick the served one or a file.");
    return { text: $("template-text").value, bos_token: $("bos").value, eos_token: $("eos").value };
  }

  function request() {
    const body = {
      messages: parsed("messages", "Messages"),
      tools: $("tools").value.trim() ? parsed("tools", "Tools") : null,
      chat_template_kwargs: $("kwargs").value.trim() ? parsed("kwargs", "chat_template_kwargs") : null,
      add_generation_prompt: $("generation-prompt").checked,
      continue_final_message: $("continue-final").checked,
    };
    const intent = $("intent").value;
    if (intent === "budget") {
      body.thinking = { type: "enabled", budget_tokens: Number($("budget").value) };
    } else if (intent) {
      Object.assign(body, INTENTS[intent]);
    }
    return body;
  }

  async function call(path, body) {
    const headers = { "content-type": "application/json" };
    if ($("api-key").value) headers.authorization = `Bearer ${$("api-key").value}`;
    const response = await fetch(path, {
      method: body === undefined ? "GET" : "POST",
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) throw answer;
    return answer;
  }

  // --- errors and status ----------------------------------------------------------------------------------------

  function showError(error) {
    const box = $("errors");
    box.replaceChildren();
    if (error instanceof Refused || error instanceof Error) {
      box.append(element("p", error.message));
      return;
    }
    const detail = error.error || {};
    box.append(element("p", detail.message || "the server refused the request"));
    if (detail.param) box.append(element("p", `field: ${detail.param}`, "where"));
    const place = detail.template;
    if (place && place.line != null) {
      const pre = element("pre");
      pre.append(element("span", `line ${place.line} | `, "where"));
      const line = place.source_line || "";
      const [start, end] = place.span || [0, 0];
      pre.append(document.createTextNode(line.slice(0, start)));
      pre.append(element("mark", line.slice(start, end) || " ", "error-span"));
      pre.append(document.createTextNode(line.slice(end)));
      box.append(pre);
    }
  }

  function clearError() {
    $("errors").replaceChildren();
  }

  async function busy(what, work) {
    const outputs = $("outputs");
    outputs.setAttribute("aria-busy", "true");
    $("status").textContent = `${what}…`;
    const started = performance.now();
    try {
      await work();
      clearError();
      outputs.classList.remove("stale");
      $("status").textContent = `${what}: done in ${Math.round(performance.now() - started)} ms`;
    } catch (error) {
      showError(error);
      outputs.classList.add("stale");
      $("status").textContent = `${what}: failed`;
    } finally {
      outputs.removeAttribute("aria-busy");
    }
  }

  // --- outputs --------------------------------------------------------------------------------------------------

  function rows(list, entries) {
    list.replaceChildren();
    for (const [term, value] of entries) {
      list.append(element("dt", term));
      list.append(element("dd", typeof value === "string" ? value : JSON.stringify(value)));
    }
  }

  function showCaps(answer) {
    const caps = answer.caps;
    const calls = caps.tools.call_format;
    rows($("caps-summary"), [
      ["roles", Object.keys(caps.roles).filter((key) => caps.roles[key] === true).join(", ") || "none"],
      ["content", caps.content.typed ? `typed (${caps.content.block_types.join(", ")})` : "strings"],
      ["tools", ["definitions", "calls", "responses", "parallel_calls"].filter((key) => caps.tools[key]).join(", ") || "none"],
      ["call format", calls ? calls.begin + calls.call + calls.end : "none"],
      ["reasoning", `${caps.reasoning.format}; controls: ${caps.reasoning.controls.map((c) => c.name).join(", ") || "none"}`],
      ["end of turn", caps.end_of_turn === null ? "none" : caps.end_of_turn],
      ["probe errors", String(caps.probe_errors.length)],
    ]);
    $("caps").textContent = json(caps);
  }

  function showRender(answer) {
    const prompt = $("prompt");
    prompt.replaceChildren();
    let marked = false;
    for (const piece of answer.pieces) {
      const classes = [piece.special ? "special" : "", piece.generation ? "gen" : ""];
      if (piece.generation && !marked) {
        classes.push("gen-start");
        marked = true;
      }
      const className = classes.filter(Boolean).join(" ");
      prompt.append(className ? element("span", piece.text, className) : document.createTextNode(piece.text));
    }
    const about = answer.template;
    $("template-about").textContent = `${about.name} (${about.engine}, sha256 ${about.sha256.slice(0, 12)})`;
    const report = answer.report;
    const reasoning = report.reasoning;
    rows($("report"), [
      ["applied", report.applied.length ? report.applied.map((a) => `${a.polyfill}: ${a.detail}`).join("\n") : "none"],
      [
        "intent → emitted",
        `${reasoning.intent ?? "default"} → ${reasoning.emitted ?? "nothing"} (${reasoning.mechanism}` +
          `${reasoning.exact ? "" : ", not exact"}${reasoning.note ? `: ${reasoning.note}` : ""})`,
      ],
      ["unused kwargs", report.unused_template_args.join(", ") || "none"],
      ["warnings", report.warnings.join("\n") || "none"],
      ["generation prompt", report.generation_prompt],
      ["starts in reasoning", String(report.starts_in_reasoning)],
      ["special tokens", answer.special_tokens.join("  ") || "none known"],
    ]);
  }

  function showReply(answer) {
    const message = answer.choice.message;
    rows($("parsed"), [
      ["reasoning", message.reasoning_content ?? "none"],
      ["content", message.content ?? "null"],
      ["finish reason", answer.choice.finish_reason],
      ["warnings", answer.warnings.join("\n") || "none"],
    ]);
    const table = $("tool-calls");
    const body = table.tBodies[0];
    body.replaceChildren();
    for (const call of message.tool_calls || []) {
      const row = element("tr");
      row.append(element("td", call.id), element("td", call.function.name), element("td", call.function.arguments));
      body.append(row);
    }
    table.hidden = !(message.tool_calls || []).length;
    const stream = $("stream");
    stream.replaceChildren();
    const steps = [
      { label: "initial", deltas: answer.stream.initial },
      ...answer.stream.fed.map((step) => ({ label: `fed ${JSON.stringify(step.text)}`, deltas: step.deltas })),
      { label: "close", deltas: answer.stream.close },
    ];
    for (const step of steps) {
      const deltas = step.deltas.length ? step.deltas.map((delta) => JSON.stringify(delta)).join("  ") : "(held)";
      stream.append(element("li", `${step.label} → ${deltas}`));
    }
  }

  // --- actions --------------------------------------------------------------------------------------------------

  async function renderAll() {
    await busy("Rendering", async () => {
      const body = { template: template(), request: request() };
      showCaps(await call("/playground/caps", body));
      const specials = $("specials").value.split(/\s+/).filter(Boolean);
      showRender(await call("/playground/render", { ...body, special_tokens: specials }));
      if ($("reply").value) showReply(await call("/playground/reply", replyBody(body)));
    });
  }

  function replyBody(body) {
    return { ...body, reply: $("reply").value, chunk_chars: Number($("chunk").value) || 1 };
  }

  async function readReply() {
    await busy("Reading the reply", async () => {
      showReply(await call("/playground/reply", replyBody({ template: template(), request: request() })));
    });
  }

  async function offered() {
    const answer = await call("/playground/templates");
    const files = $("file");
    files.replaceChildren();
    for (const name of answer.files) files.append(element("option", name));
    if (answer.files.length) {
      files.disabled = false;
      $("source-path").disabled = false;
    }
    if (answer.served !== null) {
      $("served-name").textContent = answer.served;
      $("source-served").disabled = false;
      $("source-served").checked = true;
    } else if (answer.files.length) {
      $("source-path").checked = true;
    } else {
      $("source-text").checked = true;
    }
  }

  $("request").addEventListener("submit", (event) => {
    event.preventDefault();
    renderAll();
  });
  $("read").addEventListener("click", readReply);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      renderAll();
    }
  });
  // Typing or pasting a template picks it.
  $("template-text").addEventListener("input", () => {
    $("source-text").checked = true;
  });
  $("file").addEventListener("change", () => {
    $("source-path").checked = true;
  });
  function start() {
    offered().then(() => {
      clearError();
      if (!$("source-text").checked) renderAll();
    }, showError);
  }
  // A server with a key answers 401 until it is typed in; then the page starts over.
  $("api-key").addEventListener("change", start);
  start();
})();
