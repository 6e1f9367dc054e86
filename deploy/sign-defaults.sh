#!/bin/sh
# The default plugins as the image ships them: each component with its manifest,
# sealed and signed, and a trust policy naming the key they were signed with.
#   sign-defaults.sh OUT WEFTD COMPONENTS [KEY]
# Without KEY (or with an empty one) a key is made in a temporary directory and
# removed: what is shipped trusts only these plugins.
set -eu
out=$1 weftd=$2 components=$3 key=${4:-}
mkdir -p "$out/plugins"
if [ -n "$key" ] && [ -s "$key" ]; then
  public=$("$weftd" plugin public "$key")
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  key=$tmp/ephemeral.key
  public=$("$weftd" plugin keygen --out "$key")
fi
# file:name:priority
for p in regeneration_policy:regeneration-policy:0 sync_events:sync-events:5; do
  file=${p%%:*} rest=${p#*:}
  name=${rest%%:*} priority=${rest#*:}
  cp "$components/$file.wasm" "$out/plugins/$file.wasm"
  printf 'name = "%s"\nversion = "0.1.0"\nwasm = "%s.wasm"\nsha256 = ""\npriority = %s\n' \
    "$name" "$file" "$priority" > "$out/plugins/$name.toml"
  "$weftd" plugin seal "$out/plugins/$name.toml" --key "$key" >/dev/null
done
printf '[[keys]]\nname = "weft"\npublic = "%s"\nplugins = ["regeneration-policy", "sync-events"]\n' \
  "$public" > "$out/trust.toml"
