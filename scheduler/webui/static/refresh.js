// Progressive enhancement: the page reloads itself (meta refresh) without
// this script; with it, it also reloads as soon as the scheduler's model
// changes (its index, from /v1/health).
(function () {
  var body = document.body;
  var index = body.getAttribute("data-index");
  var health = body.getAttribute("data-health");
  if (!index || !health || !window.fetch) {
    return;
  }
  setInterval(function () {
    fetch(health, { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (h) {
        if (h && h.index !== undefined && String(h.index) !== index) {
          location.reload();
        }
      })
      .catch(function () {});
  }, 3000);
})();
