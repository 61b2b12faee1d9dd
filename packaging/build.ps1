# Build the one-folder Windows bundle of cadre-desktop with PyInstaller.
#
#   powershell -ExecutionPolicy Bypass -File packaging\build.ps1 [-Dist DIR] [-Work DIR] [-NoArchive] [-Installer]
#
# Needs Python 3.11 or later (python.org installer, with the `py` launcher or `python`
# on PATH). Makes .venv if missing, installs the project with its `package` extra
# (PyInstaller), then runs packaging\cadre-desktop.spec. Output:
#   dist\cadre-desktop\cadre-desktop.exe       the tray app (no console window)
#   dist\cadre-desktop\cadre-desktop-cli.exe   the same program with a console: --headless, node ..., doctor
#   dist\cadre-desktop-<version>-windows-<arch>.zip
#   dist\cadre-desktop-<version>-windows-x64-setup.exe   with -Installer: Inno Setup 6 (iscc) makes it
#                                                        from windows\cadre-desktop.iss (on GitHub's runners
#                                                        already; elsewhere: winget install JRSoftware.InnoSetup)
param(
    [string]$Dist = "",
    [string]$Work = "",
    [switch]$NoArchive,
    [switch]$Installer
)
$ErrorActionPreference = "Stop"
Set-StrictMode -Version Latest

$Root = Split-Path -Parent $PSScriptRoot
if (-not $Dist) { $Dist = Join-Path $Root "dist" }
if (-not $Work) { $Work = Join-Path $Root "build" }
$Venv = Join-Path $Root ".venv"
$Python = Join-Path $Venv "Scripts\python.exe"
$App = "cadre-desktop"

# Native commands do not stop the script on failure by themselves.
function Invoke-Checked {
    param([string]$Exe, [Parameter(ValueFromRemainingArguments = $true)][string[]]$Arguments)
    & $Exe @Arguments
    if ($LASTEXITCODE -ne 0) { throw "$Exe $($Arguments -join ' ') exited with $LASTEXITCODE" }
}

if (-not (Test-Path $Python)) {
    if (Get-Command py -ErrorAction SilentlyContinue) {
        Invoke-Checked py -3 -m venv $Venv
    } else {
        Invoke-Checked python -m venv $Venv
    }
}
Invoke-Checked $Python -c "import sys; sys.exit(0 if sys.version_info >= (3, 11) else 'cadre-desktop needs Python 3.11 or later')"
Invoke-Checked $Python -m pip install -q --upgrade pip
Invoke-Checked $Python -m pip install -q -e "$Root[package]"

$Version = (& $Python -c "import cadre_desktop; print(cadre_desktop.__version__)").Trim()
$Started = Get-Date
Invoke-Checked $Python -m PyInstaller --noconfirm --clean --log-level WARN `
    --distpath $Dist --workpath $Work (Join-Path $Root "packaging\cadre-desktop.spec")

$Bundle = Join-Path $Dist $App
$Cli = Join-Path $Bundle "$App-cli.exe"
$Built = (& $Cli --version | Out-String).Trim()
if ($LASTEXITCODE -ne 0) { throw "$Cli --version exited with $LASTEXITCODE" }
$Size = (Get-ChildItem $Bundle -Recurse -File | Measure-Object -Property Length -Sum).Sum / 1MB
$Seconds = [int]((Get-Date) - $Started).TotalSeconds
Write-Output ("built {0} in {1} s: {2} ({3:N0} MB)" -f $Built, $Seconds, $Bundle, $Size)

if (-not $NoArchive) {
    $Arch = if ([Environment]::Is64BitOperatingSystem) { "x64" } else { "x86" }
    if ($env:PROCESSOR_ARCHITECTURE -eq "ARM64") { $Arch = "arm64" }
    $Zip = Join-Path $Dist "$App-$Version-windows-$Arch.zip"
    if (Test-Path $Zip) { Remove-Item $Zip }
    Compress-Archive -Path $Bundle -DestinationPath $Zip
    Write-Output "archive: $Zip"
}

if ($Installer) {
    $Iscc = Get-Command iscc -ErrorAction SilentlyContinue
    $Iscc = if ($Iscc) { $Iscc.Source } else { Join-Path ${env:ProgramFiles(x86)} "Inno Setup 6\ISCC.exe" }
    if (-not (Test-Path $Iscc)) { throw "-Installer needs Inno Setup 6 (iscc): winget install JRSoftware.InnoSetup" }
    if (-not [Environment]::Is64BitOperatingSystem -or $env:PROCESSOR_ARCHITECTURE -eq "ARM64") {
        throw "the installer is made for x64 Windows only"
    }
    # The icon the spec rendered into the work folder (icons\make_icons.py).
    $Icon = Join-Path $Work "$App\icons\$App.ico"
    Invoke-Checked $Iscc /Q "/DAppVersion=$Version" "/DBundle=$Bundle" "/DIcon=$Icon" "/DOutDir=$Dist" `
        (Join-Path $Root "packaging\windows\cadre-desktop.iss")
    Write-Output "installer: $(Join-Path $Dist "$App-$Version-windows-x64-setup.exe")"
}
