// The live page's one script: when the server says the records changed,
// fetch the page again and show it in place. Without it the page is the
// report as it stood when it was loaded.
(function () {
  var shown = document.body.dataset.lastSeq;
  var events = new EventSource("/ui/events");
  events.onmessage = function (e) {
    if (e.data === shown) {
      return;
    }
    shown = e.data;
    fetch("/ui/page", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var page = new DOMParser().parseFromString(html, "text/html");
        document.body.innerHTML = page.body.innerHTML;
        document.body.dataset.lastSeq = page.body.dataset.lastSeq;
      });
  };
})();
