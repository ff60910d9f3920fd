// The matrix page of the zoo site: filter by capability, search by name, sort a column (click, Enter or Space).
"use strict";
(() => {
  const table = document.getElementById("matrix");
  if (!table) return;
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  const search = document.getElementById("search");
  const selects = Array.from(document.querySelectorAll("select[data-facet]"));
  const count = document.getElementById("count");

  const holds = (row, select) =>
    !select.value || (row.getAttribute("data-f-" + select.dataset.facet) || "").split("|").includes(select.value);

  function filter() {
    const query = search.value.trim().toLowerCase();
    let shown = 0;
    for (const row of rows) {
      const visible = row.dataset.name.toLowerCase().includes(query) && selects.every((select) => holds(row, select));
      row.hidden = !visible;
      shown += visible ? 1 : 0;
    }
    count.textContent = `${shown} of ${rows.length} templates`;
  }

  const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
  const headers = Array.from(table.tHead.rows[0].cells);

  function sort(header) {
    const ascending = header.getAttribute("aria-sort") !== "ascending";
    const column = Number(header.dataset.column);
    for (const other of headers) other.setAttribute("aria-sort", "none");
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const text = (row) => row.cells[column].textContent.trim();
    const sorted = rows.slice().sort((a, b) => collator.compare(text(a), text(b)) * (ascending ? 1 : -1));
    body.append(...sorted);
  }

  for (const header of headers) {
    header.addEventListener("click", () => sort(header));
    header.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        sort(header);
      }
    });
  }
  search.addEventListener("input", filter);
  for (const select of selects) select.addEventListener("change", filter);
  document.getElementById("filters").addEventListener("reset", () => setTimeout(filter));
  document.getElementById("filters").addEventListener("submit", (event) => event.preventDefault());
  filter();
})();
