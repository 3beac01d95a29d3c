// Option picker: say whether the chosen combination is in stock before the form is sent.
const buy = document.getElementById("buy");
if (buy) {
  const stock = JSON.parse(buy.dataset.stock);
  const status = document.getElementById("availability");
  const names = stock.options;
  const update = () => {
    const chosen = names.map((n) => buy.querySelector(`input[name="${CSS.escape(n)}"]:checked`));
    if (chosen.some((c) => !c)) {
      status.textContent = "Choose " + names.filter((n, i) => !chosen[i]).join(" and ") + ".";
      return;
    }
    const units = stock.units[chosen.map((c) => c.value).join("|")] || 0;
    status.textContent = units > 0 ? `In stock (${units} left).` : "Out of stock in this choice.";
  };
  buy.addEventListener("change", update);
  update();
  // Recently viewed products, as shops keep them: per browser, in localStorage.
  const id = buy.querySelector('input[name="product"]').value;
  const recent = JSON.parse(localStorage.getItem("recentlyViewed") || "[]").filter((x) => x !== id);
  localStorage.setItem("recentlyViewed", JSON.stringify([id, ...recent].slice(0, 10)));
}
// Ask before removing a cart line.
for (const form of document.querySelectorAll("form.remove")) {
  form.addEventListener("submit", (event) => {
    if (!confirm(form.dataset.confirm)) event.preventDefault();
  });
}
