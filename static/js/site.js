// Loaded in <head> of every page, without defer: the "js" class must be there before the page is
// drawn (the stylesheet shows what only works with JavaScript under it).
document.documentElement.classList.add("js");

// <button data-print>: print the page (no inline handlers: the Content-Security-Policy refuses them).
document.addEventListener("click", (event) => {
  if (event.target instanceof Element && event.target.closest("[data-print]")) {
    window.print();
  }
});

// Sign-up: propose the browser's time zone for the profile (the server checks the name).
document.addEventListener("DOMContentLoaded", () => {
  let zone = "";
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  } catch (error) {
    zone = "";
  }
  for (const input of document.querySelectorAll("input[data-browser-time-zone]")) {
    if (!input.value) input.value = zone;
  }
});
