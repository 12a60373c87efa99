// Loaded in <head> of every page, without defer: the "js" class must be there before the page is
// drawn (the stylesheet shows what only works with JavaScript under it).
document.documentElement.classList.add("js");

// <button data-print>: print the page (no inline handlers: the Content-Security-Policy refuses them).
document.addEventListener("click", (event) => {
  if (event.target instanceof Element && event.target.closest("[data-print]")) {
    window.print();
  }
});

// The menu button of the header on narrow screens (base.html): it shows and hides the navigation
// and says so through aria-expanded; Escape closes it and gives the focus back to the button.
document.addEventListener("click", (event) => {
  const button = event.target instanceof Element && event.target.closest("[data-menu-button]");
  if (!button) {
    return;
  }
  const open = button.getAttribute("aria-expanded") !== "true";
  button.setAttribute("aria-expanded", String(open));
  button.closest(".site-header").classList.toggle("menu-open", open);
});
document.addEventListener("keydown", (event) => {
  const header = document.querySelector(".site-header.menu-open");
  if (event.key === "Escape" && header) {
    const button = header.querySelector("[data-menu-button]");
    button.setAttribute("aria-expanded", "false");
    header.classList.remove("menu-open");
    button.focus();
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

// Seller application: the VAT ID's help shows the format of the country chosen (the select carries
// every country's help, already in the page's language; without JavaScript the page shows the
// format of the country saved or sent).
document.addEventListener("change", (event) => {
  const select = event.target instanceof HTMLSelectElement && event.target.closest("[data-vat-help]");
  const help = select && document.getElementById("id_vat_id_helptext");
  if (!help) {
    return;
  }
  const texts = JSON.parse(select.dataset.vatHelp);
  help.textContent = texts[select.value] ?? texts[""];
});

// Order forms: with one of the saved keys chosen, the fields to paste and save another key step
// aside (they are there again with "another key"). Without JavaScript both stay shown.
function pastedKeyFieldsShow(form) {
  const chosen = form.querySelector("input[name=ssh_key]:checked");
  const pasting = !chosen || chosen.value === "";
  for (const name of ["ssh_public_key", "save_key_as"]) {
    const input = form.querySelector(`[name=${name}]`);
    if (input) {
      input.closest(".field").hidden = !pasting;
    }
  }
}
document.addEventListener("change", (event) => {
  if (event.target instanceof HTMLInputElement && event.target.name === "ssh_key" && event.target.form) {
    pastedKeyFieldsShow(event.target.form);
  }
});
document.addEventListener("DOMContentLoaded", () => {
  for (const radio of document.querySelectorAll("input[name=ssh_key]:checked")) {
    pastedKeyFieldsShow(radio.form);
  }
});
