// @ts-check
// The page's shape for the screen it is on: at a phone's width (860 px and less, as styles.css) the
// chat comes first and the settings fold away under their summary; wider, they stay open beside it.
import { el } from "./dom.js";

const PHONE = "(max-width: 860px)";

export function wireLayout() {
  const phone = matchMedia(PHONE);
  const apply = () => { el.settingsFold.open = !phone.matches; };
  phone.addEventListener("change", apply);
  apply();
}
