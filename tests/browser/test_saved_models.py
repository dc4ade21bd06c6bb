"""Saved models (web/app/opfs.js) that must not overwrite each other or be listed when broken (issue 19), in
Chromium: two files whose names differ only outside ASCII ("Qwen-日本語.gguf", "Qwen-中文.gguf") and two
different files of one name are all kept, each in a folder of its own, and each loads; a copy cut short
(meta.json beside fewer bytes, as the older scheme could leave one) or without meta.json is never listed
and is removed, while a complete folder of the older scheme is still listed and loads; a write that fails
while saving (a full quota) is said, its copy aborted and removed, and nothing else is lost; the model's
name is kept at 200 chars in meta.json."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import TINY

from browser.pages import load_model, wait_ready

pytestmark = pytest.mark.browser

# {folder: {file: size}} of models/ in OPFS.
FOLDERS = """async () => {
  const root = await (await navigator.storage.getDirectory()).getDirectoryHandle('models', { create: true });
  const out = {};
  for await (const [folder, dir] of root.entries()) {
    out[folder] = {};
    for await (const [name, f] of dir.entries()) out[folder][name] = (await f.getFile()).size;
  }
  return out;
}"""

# The saved-model list drawn again (as another tab's change draws it); resolves once it is drawn.
REDRAW = "async () => { await (await import('./app/saved_models.js')).drawModels(); }"


def saved(page) -> list[str]:
    """The saved models' files as the list shows them (each item's Load button names the model)."""
    return page.evaluate("""async () => {
      const { listModels } = await import('./app/opfs.js');
      return (await listModels()).models.map((m) => m.files.join('+'));
    }""")


def wait_saved(page, count: int) -> None:
    page.wait_for_function("""n => document.querySelectorAll('[data-testid=saved-model-list] li').length === n
      && document.querySelector('[data-testid=storage-note]').textContent.startsWith('This')""", arg=count,
                           timeout=120_000)


def forget_all(page) -> None:
    page.evaluate("""async () => {
      const opfs = await import('./app/opfs.js');
      for (const m of (await opfs.listModels()).models) await opfs.forgetModel(m);
    }""")
    page.evaluate(REDRAW)


def test_models_whose_names_collide_are_all_kept(app, tmp_path):
    forget_all(app)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    paths = [tmp_path / "Qwen-日本語.gguf", tmp_path / "Qwen-中文.gguf", tmp_path / "a" / "ggml-model-q4_0.gguf",
             tmp_path / "b" / "ggml-model-q4_0.gguf"]
    for path, source in zip(paths, [TINY["llama"], TINY["llama"], TINY["llama"], TINY["qwen2"]], strict=True):
        shutil.copyfile(source, path)
    for n, path in enumerate(paths, 1):
        load_model(app, [path])
        wait_saved(app, n)
    assert sorted(saved(app)) == sorted(p.name for p in paths)
    folders = app.evaluate(FOLDERS)
    assert len(folders) == 4
    assert sorted(size for files in folders.values() for name, size in files.items() if name != "meta.json") == sorted(
        p.stat().st_size for p in paths)
    for item in app.locator("[data-testid=saved-model-list] li").all():   # each one loads
        item.get_by_role("button", name="Load").click()
        wait_ready(app)
    load_model(app, [paths[0]])                                          # loaded again: not saved twice
    app.evaluate(REDRAW)
    assert len(app.evaluate(FOLDERS)) == 4


# Write a folder of the older scheme (named after the file, meta.json without sizes) holding ``keep`` of
# the file's bytes, and a folder without meta.json (a copy that did not finish).
PUT_OLD = """async ([bytes, keep]) => {
  const root = await (await navigator.storage.getDirectory()).getDirectoryHandle('models', { create: true });
  const write = async (dir, name, data) => {
    const w = await (await dir.getFileHandle(name, { create: true })).createWritable();
    await w.write(data);
    await w.close();
  };
  const data = Uint8Array.from(bytes);
  const folder = `old-${keep}.gguf`;
  const dir = await root.getDirectoryHandle(folder, { create: true });
  await write(dir, folder, data.slice(0, keep));
  await write(dir, 'meta.json', JSON.stringify({ name: 'old', files: [folder], size: data.length, saved: 1 }));
  await write(await root.getDirectoryHandle('unfinished', { create: true }), 'x.gguf', data.slice(0, 100));
}"""


def test_a_copy_cut_short_is_never_listed(app):
    forget_all(app)
    data = list(TINY["llama"].read_bytes())
    app.evaluate(PUT_OLD, [data, len(data) // 2])
    app.evaluate(PUT_OLD, [data, len(data)])
    app.evaluate(REDRAW)
    assert saved(app) == [f"old-{len(data)}.gguf"]                        # the older scheme's complete copy
    assert sorted(app.evaluate(FOLDERS)) == [f"old-{len(data)}.gguf"]     # the broken ones removed
    app.get_by_role("button", name="Load the saved model old").click()
    wait_ready(app)
    # a load checks the sizes too (a copy cut short after it was listed)
    error = app.evaluate("""async ([size]) => {
      const opfs = await import('./app/opfs.js');
      const [entry] = (await opfs.listModels()).models;
      return opfs.modelFiles({ ...entry, size: size + 1 }).then(() => 'loaded', (e) => e.message);
    }""", [len(data)])
    assert error == f"the saved copy holds {len(data)} of its {len(data) + 1} bytes: forget it and load the file again"


# The writes of a save fail after the first chunk, as a full quota makes them fail.
FAIL_SAVES = """() => {
  const write = FileSystemWritableFileStream.prototype.write;
  window.writes = 0;
  FileSystemWritableFileStream.prototype.write = function (data) {
    if (++window.writes > 1) return Promise.reject(new DOMException('the quota is used up', 'QuotaExceededError'));
    return write.call(this, data);
  };
  window.undo = () => { FileSystemWritableFileStream.prototype.write = write; };
}"""


def test_a_failed_save_is_said_and_loses_nothing(app, tmp_path):
    load_model(app, [TINY["llama"]])      # (a model loaded from a folder is not forgotten under it)
    forget_all(app)
    load_model(app, [TINY["llama-q4km"]])
    wait_saved(app, 1)
    before = app.evaluate(FOLDERS)
    app.evaluate(FAIL_SAVES)
    try:
        path = tmp_path / "second.gguf"
        shutil.copyfile(TINY["qwen2"], path)
        load_model(app, [path])
        app.wait_for_function("() => document.querySelector('[data-testid=storage-note]').textContent"
                              ".includes('is not saved')", timeout=60_000)
    finally:
        app.evaluate("() => window.undo()")
    note = app.get_by_test_id("storage-note").text_content()
    assert note.endswith(" is not saved: the quota is used up. The model stays loaded; the models saved before "
                         "are kept."), note
    assert app.get_by_test_id("status").text_content() == "ready"
    assert app.evaluate(FOLDERS) == before                              # the copy aborted and removed
    assert saved(app) == [TINY["llama-q4km"].name]
    app.get_by_role("button", name="Load the saved model").click()      # the model saved before still loads
    wait_ready(app)


def test_the_model_name_is_kept_at_200_chars_in_meta(app, tmp_path):
    forget_all(app)
    path = tmp_path / "named.gguf"
    shutil.copyfile(TINY["llama"], path)
    meta = app.evaluate("""async ([bytes]) => {
      const opfs = await import('./app/opfs.js');
      const entry = await opfs.saveModel([new File([Uint8Array.from(bytes)], 'named.gguf')], 'N'.repeat(300_000));
      const dir = await (await (await navigator.storage.getDirectory()).getDirectoryHandle('models'))
        .getDirectoryHandle(entry.folder);
      return JSON.parse(await (await (await dir.getFileHandle('meta.json')).getFile()).text());
    }""", [list(path.read_bytes()[:1000])])
    assert meta["name"] == "N" * 200 and meta["files"] == ["named.gguf"] and meta["sizes"] == [1000]
    forget_all(app)
    assert json.dumps(app.evaluate(FOLDERS)) == "{}"
