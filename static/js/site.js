// Loaded in <head> of every page, without defer: the "js" class must be there before the page is
// drawn (the stylesheet shows what only works with JavaScript under it).
document.documentElement.classList.add("js");

// <button data-print>: print the page (no inline handlers: the Content-Security-Policy refuses them).
document.addEventListener("click", (event) => {
  if (event.target instanceof Element && event.target.closest("[data-print]")) {
    window.print();
  }
});
