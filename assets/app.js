// butler-memory dashboard: keyboard shortcuts and the detail drawer. No inline script
// anywhere (the Content-Security-Policy allows scripts from this origin only).
document.addEventListener("keydown", function (event) {
  var target = event.target;
  var typing = target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT");
  if (event.key === "/" && !typing) {
    var box = document.getElementById("search-box");
    if (box) { event.preventDefault(); box.focus(); box.select(); }
  }
  if (event.key === "Escape") { closeDrawer(); }
});
document.addEventListener("click", function (event) {
  var close = event.target.closest && event.target.closest("[data-close-drawer]");
  if (close) { event.preventDefault(); closeDrawer(); }
});
function closeDrawer() {
  var drawer = document.getElementById("drawer");
  if (drawer) { drawer.innerHTML = ""; }
}
