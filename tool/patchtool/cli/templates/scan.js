(() => {
  document.documentElement.classList.add("js");
  const grid = document.getElementById("grid"), panel = document.getElementById("panel");
  const hint = [...panel.childNodes];
  let pinned = null;
  const show = (link) => {
    const section = link && document.getElementById(link.hash.slice(1));
    panel.replaceChildren(...(section ? [...section.childNodes].map((n) => n.cloneNode(true)) : hint));
  };
  const linkOf = (event) => event.target.closest && event.target.closest("a.cell-link");
  grid.addEventListener("mouseover", (e) => { const a = linkOf(e); if (a) show(a); });
  grid.addEventListener("focusin", (e) => { const a = linkOf(e); if (a) show(a); });
  grid.addEventListener("mouseleave", () => show(pinned));
  grid.addEventListener("click", (e) => {
    const a = linkOf(e);
    if (!a) return;
    e.preventDefault();
    if (pinned) pinned.parentElement.classList.remove("selected");
    pinned = a;
    a.parentElement.classList.add("selected");
    show(a);
  });
  const start = [...grid.querySelectorAll("a.cell-link")].find((a) => location.hash && a.hash === location.hash);
  if (start) start.click();
})();
