// The schedule form's preview: the next occurrences of the timing being edited, in its zone.
(function () {
  "use strict";
  var FIELDS = ["kind", "cron", "tz", "every_seconds", "anchor", "at", "start_at", "end_at"];

  function value(name) {
    var single = document.getElementById("id_" + name);
    if (single) return single.value;
    var date = document.getElementById("id_" + name + "_0");
    var time = document.getElementById("id_" + name + "_1");
    if (date && date.value) return date.value + " " + ((time && time.value) || "00:00:00");
    return "";
  }

  function refresh() {
    var box = document.getElementById("rq-preview");
    var list = document.getElementById("rq-preview-list");
    if (!box || !list || !box.dataset.url) return;
    var query = FIELDS.map(function (name) {
      return encodeURIComponent(name) + "=" + encodeURIComponent(value(name));
    }).join("&");
    fetch(box.dataset.url + "?" + query, { credentials: "same-origin" })
      .then(function (response) { return response.json(); })
      .then(function (data) {
        list.textContent = "";
        var lines = data.next || [];
        if (data.errors) {
          lines = [];
          Object.keys(data.errors).forEach(function (field) {
            data.errors[field].forEach(function (message) { lines.push(message); });
          });
        }
        lines.forEach(function (line) {
          var item = document.createElement("li");
          item.textContent = line;
          list.appendChild(item);
        });
        if (!lines.length) {
          var none = document.createElement("li");
          none.textContent = "never fires again";
          list.appendChild(none);
        }
      })
      .catch(function () { /* the saved preview stays */ });
  }

  document.addEventListener("DOMContentLoaded", function () {
    FIELDS.forEach(function (name) {
      ["id_" + name, "id_" + name + "_0", "id_" + name + "_1"].forEach(function (id) {
        var input = document.getElementById(id);
        if (input) input.addEventListener("change", refresh);
      });
    });
  });
})();
