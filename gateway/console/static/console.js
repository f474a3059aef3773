// The console's one script: live parts, the upload with its progress, confirmations.
// No library, nothing fetched from elsewhere; every page works to read without it.
"use strict";

function refreshLive(region) {
  const url = region.dataset.live;
  const every = Math.max(1, Number(region.dataset.every || "3")) * 1000;
  let stopped = false;
  async function tick() {
    if (stopped) return;
    if (!document.hidden) {
      try {
        const reply = await fetch(url, { headers: { "X-Console": "script" }, credentials: "same-origin", cache: "no-store" });
        if (reply.status === 401 || reply.status === 403) {
          stopped = true;
          region.insertAdjacentHTML("beforebegin", '<p class="error" role="alert">Signed out: <a href="/console/signin">sign in again</a>.</p>');
          return;
        }
        if (reply.ok) {
          const html = await reply.text();
          const focused = region.contains(document.activeElement) ? document.activeElement : null;
          const focusKey = focused && (focused.getAttribute("href") || focused.id);
          region.innerHTML = html;
          if (focusKey) {
            const again = Array.from(region.querySelectorAll("a, button, [id]")).find(
              (el) => el.getAttribute("href") === focusKey || el.id === focusKey);
            if (again) again.focus();
          }
          region.dataset.refreshed = String(Number(region.dataset.refreshed || "0") + 1);
        }
      } catch (err) {
        // The gateway restarting or the network gone: try again at the next tick.
      }
    }
    setTimeout(tick, every);
  }
  setTimeout(tick, every);
}

function upload(form) {
  const bar = document.getElementById("upload-progress");
  const status = document.getElementById("upload-status");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.setRequestHeader("X-CSRF-Token", form.dataset.csrf);
    xhr.setRequestHeader("X-Console", "script");
    bar.hidden = false;
    bar.value = 0;
    status.className = "";
    status.textContent = "Uploading…";
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) {
        bar.value = Math.round((100 * e.loaded) / e.total);
        status.textContent = `Uploading… ${bar.value}%`;
      }
    };
    xhr.onload = () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (err) { body = null; }
      if (xhr.status === 202 && body && body.id) {
        bar.value = 100;
        status.textContent = `Uploaded: batch ${body.id} (${body.counts.total} entries)`;
        window.location.assign(`/console/batches/${encodeURIComponent(body.id)}`);
        return;
      }
      status.className = "error";
      status.textContent = body && body.error ? `Refused (${xhr.status}): ${body.error.message}` : `Refused (${xhr.status})`;
    };
    xhr.onerror = () => {
      status.className = "error";
      status.textContent = "The upload did not get through (connection lost); try again.";
    };
    xhr.send(new FormData(form));
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-live]").forEach(refreshLive);
  const form = document.getElementById("upload");
  if (form) upload(form);
});

// On the document, so forms a live part swaps in are asked too.
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});
